-- Raise a semaphore's fence to at least a token, where the holder's lease is still live: the
-- write-back step of Redlock's quorum fencing for permits (see fence_raise.lua).
--
-- KEYS[1]  the holders (zset: owner -> end of its lease, server ms)
-- KEYS[2]  the fence (stream: the last fencing token handed out; see fence.lua)
-- ARGV[1]  the owner token of the lease
-- ARGV[2]  the token to raise the fence to
-- ARGV[3]  the fence's retention, in ms
--
-- Returns 1  raised (or already as high), and the lease is live here
--         0  the lease is not live here, or the fence key is not a fence: nothing changed
local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not ends then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(ends) <= now then
  return 0
end
if not raise_fence(KEYS[2], ARGV[2], ARGV[3]) then
  return 0
end
return 1
