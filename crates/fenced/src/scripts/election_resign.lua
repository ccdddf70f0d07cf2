-- Step down (or end an abandoned campaign's grant): compare-and-delete the leader key, wake
-- ONLY the next candidate (free_fair, fair_free.lua), and tell the observers.
--
-- A yield (ARGV[5] given) steps down for a chosen successor: the first candidate of the
-- queue still registered whose recorded value is ARGV[5] is moved to its head first, so it
-- is the one woken and the only one that can be elected next (fair_take.lua elects only the
-- head). With no such candidate, nothing changes and the leader leads on.
--
-- KEYS[1]  leader key
-- KEYS[2]  queue of candidates (list of waiter ids)
-- KEYS[3]  a yield's: the candidates' values (hash: waiter id -> '<queued since> <value>')
-- KEYS[4]  a yield's: registrations (hash: waiter id -> end of its registration, server ms)
-- ARGV[1]  owner token
-- ARGV[2]  the candidates' channel prefix: the head is woken on <prefix><waiter id>
-- ARGV[3]  the observers' channel
-- ARGV[4]  the announcement: '<client id> 1'
-- ARGV[5]  a yield's: the value the successor advertises
--
-- Returns 1 resigned now, 0 not leader (see release.lua: no record is kept for retries),
--         2 a yield found no such candidate: nothing changed.
if ARGV[5] then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return 0
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local chosen, at
  for i, waiter in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
    local entry = redis.call('HGET', KEYS[3], waiter)
    local ends = tonumber(redis.call('HGET', KEYS[4], waiter) or '0') or 0
    local space = entry and string.find(entry, ' ', 1, true)
    if space and ends > now and string.sub(entry, space + 1) == ARGV[5] then
      chosen, at = waiter, i
      break
    end
  end
  if not chosen then
    return 2
  end
  if at > 1 then
    -- Another waiter stays in the list meanwhile: it is never emptied, and keeps its expiry.
    redis.call('LREM', KEYS[2], 1, chosen)
    redis.call('LPUSH', KEYS[2], chosen)
  end
end
if free_fair(KEYS[1], KEYS[2], ARGV[1], ARGV[2]) then
  redis.call(PUBLISH, ARGV[3], ARGV[4])
  return 1
end
return 0
