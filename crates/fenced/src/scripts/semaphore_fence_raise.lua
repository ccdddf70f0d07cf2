-- Raise a semaphore's fence to at least a token, where the holder's lease is still live: the
-- write-back step of Redlock's quorum fencing for permits (see fence_raise.lua).
--
-- KEYS[1]  the holders (zset: owner -> end of its lease, server ms)
-- KEYS[2]  the fence (string: the last fencing token handed out)
-- ARGV[1]  the owner token of the lease
-- ARGV[2]  the token to raise the fence to
-- ARGV[3]  the fence's retention, in ms (plus 1001 s: store_fence in fence.lua)
--
-- Returns 1  raised (or already as high), and the lease is live here
--         0  the lease is not live here; nothing changed
local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not ends then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(ends) <= now then
  return 0
end
local current = redis.call('MGET', KEYS[2])[1]
if not current or (tonumber(current) or 0) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
return 1
