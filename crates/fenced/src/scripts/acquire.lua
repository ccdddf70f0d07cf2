-- Take a lease and hand out a fencing token, in one step.
--
-- KEYS[1]  lock key         (string: owner token, PX = lease)
-- KEYS[2]  fence key        (hash: last = last fencing token handed out)
-- KEYS[3]  this attempt's tombstone, <lock>:void:<owner> (exists only if abandoned)
-- ARGV[1]  owner token      (128 random bits, hex)
-- ARGV[2]  lease in ms
-- ARGV[3]  how long the fence key outlives the last grant, in ms
--
-- Returns {1, token} when granted (token as a decimal string, so no precision is lost),
--         {0, pttl}  when somebody holds the lock (pttl = -1 for a key without expiry),
--         {0, -3}    when the client already abandoned this attempt (see abandon.lua).
--
-- The token is max(last + 1, server time in microseconds). While the fence key exists the
-- counter alone keeps tokens increasing; once it has expired (no grant for the retention
-- period) the server clock, which has moved on by at least that period, keeps the next token
-- above every earlier one. So fence keys need not live forever, and tokens keep increasing
-- even after a restart that lost the data, unless the server clock stepped back by more than
-- the retention period.
if redis.call('DEL', KEYS[3]) == 1 then
  return {0, -3}
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
local now = redis.call('TIME')
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
local last = tonumber(redis.call('HGET', KEYS[2], 'last') or '0') or 0
local token = string.format('%.0f', math.max(last + 1, now_us))
redis.call('HSET', KEYS[2], 'last', token)
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return {1, token}
