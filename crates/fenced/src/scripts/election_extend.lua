-- Renew or re-time a leader's lease, in epoch order (extend.lua's rule, without take-overs:
-- a leadership is never handed over by ticket), and keep its record alive as long.
--
-- KEYS[1]  leader key
-- KEYS[2]  this owner's epoch key: <leader key>:epoch:<owner>
-- KEYS[3]  the leader record (hash)
-- ARGV[1]  owner token
-- ARGV[2]  new lease in ms, counted from now
-- ARGV[3]  the request's epoch (0, 1, 2, ...)
--
-- Returns 1 applied, 0 not held by this owner (nothing changed), 2 superseded by a newer
-- epoch (nothing changed).
local seen = redis.call('MGET', KEYS[1], KEYS[2])
if seen[1] ~= ARGV[1] then
  return 0
end
local epoch = tonumber(ARGV[3])
if epoch < (tonumber(seen[2] or '0') or 0) then
  return 2
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if epoch > 0 then
  redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
end
-- The record outlives the lease by a second, so a reader never finds the leader without it.
redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[2]) + 1000)
return 1
