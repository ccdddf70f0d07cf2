-- Step down (or end an abandoned campaign's grant): compare-and-delete the leader key, wake
-- ONLY the next candidate (free_fair, fair_free.lua), and tell the observers.
--
-- KEYS[1]  leader key
-- KEYS[2]  queue of candidates (list of waiter ids)
-- ARGV[1]  owner token
-- ARGV[2]  the candidates' channel prefix: the head is woken on <prefix><waiter id>
-- ARGV[3]  the observers' channel
-- ARGV[4]  the announcement: '<client id> 1'
--
-- Returns 1 resigned now, 0 not leader (see release.lua: no record is kept for retries).
if free_fair(KEYS[1], KEYS[2], ARGV[1], ARGV[2]) then
  redis.call(PUBLISH, ARGV[3], ARGV[4])
  return 1
end
return 0
