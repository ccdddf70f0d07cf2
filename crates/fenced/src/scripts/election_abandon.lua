-- Give up a campaign: leave the queue at once, and void an attempt of unknown outcome (step
-- down if it was elected, telling the observers; or leave a tombstone, see abandon.lua).
--
-- KEYS[1]  leader key
-- KEYS[2]  the attempt's tombstone
-- KEYS[3]  queue of candidates (list of waiter ids)
-- KEYS[4]  registrations (hash)
-- KEYS[5]  the candidates' values (hash: waiter id -> '<queued since> <value>')
-- ARGV[1]  owner token of the attempt
-- ARGV[2]  waiter id
-- ARGV[3]  the candidates' channel prefix
-- ARGV[4]  how long the tombstone lives, in ms
-- ARGV[5]  the observers' channel
-- ARGV[6]  the announcement: '<client id> 1'
--
-- Returns 1 the attempt had been elected, now stepped down; 0 it had not: a tombstone now
--         voids it.
redis.call('LREM', KEYS[3], 0, ARGV[2])
redis.call('HDEL', KEYS[4], ARGV[2])
redis.call('HDEL', KEYS[5], ARGV[2])
if free_fair(KEYS[1], KEYS[3], ARGV[1], ARGV[3]) then
  redis.call(PUBLISH, ARGV[5], ARGV[6])
  return 1
end
redis.call('SET', KEYS[2], 1, 'PX', ARGV[4])
return 0
