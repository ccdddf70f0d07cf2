-- Give a holder's permits back and wake waiters.
--
-- KEYS[1]  holders key
-- KEYS[2]  counts key
-- KEYS[3]  this release's record: <holders>:rel:<owner>
-- ARGV[1]  owner token
-- ARGV[2]  channel to publish the release on
-- ARGV[3]  message (see notify.rs: it says how many permits came back)
-- ARGV[4]  how long the record lives, in ms
--
-- Returns 1 released now, 2 already released by this owner (a retry), 0 not held.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease_end = redis.call('ZSCORE', KEYS[1], ARGV[1])
if lease_end then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  if tonumber(lease_end) > now then
    redis.call('SET', KEYS[3], 1, 'PX', ARGV[4])
    redis.call('PUBLISH', ARGV[2], ARGV[3])
    return 1
  end
  return 0
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  return 2
end
return 0
