-- Renew or re-time a semaphore holder's lease, in epoch order (see extend.lua).
--
-- KEYS[1]  holders key (zset: owner -> end of lease, server ms)
-- KEYS[2]  counts key  (hash: owner -> permits)
-- KEYS[3]  this owner's epoch key: <holders>:epoch:<owner>
-- ARGV[1]  owner token
-- ARGV[2]  new lease in ms, counted from now
-- ARGV[3]  the request's epoch
--
-- Returns 1 applied, 0 not held (expired or released; nothing changed), 2 superseded.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease_end = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not lease_end or tonumber(lease_end) <= now then
  return 0
end
local epoch = tonumber(ARGV[3])
if epoch < (tonumber(redis.call('GET', KEYS[3]) or '0') or 0) then
  return 2
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[1])
if epoch > 0 then
  redis.call('SET', KEYS[3], ARGV[3], 'PX', ttl)
end
local last_end = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last_end[2])
redis.call('PEXPIREAT', KEYS[2], last_end[2])
return 1
