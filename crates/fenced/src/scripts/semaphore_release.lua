-- Give a holder's permits back and wake waiters.
--
-- KEYS[1]  holders key
-- KEYS[2]  counts key
-- ARGV[1]  owner token
-- ARGV[2]  channel to publish the release on
-- ARGV[3]  message (see notify.rs: it says how many permits came back)
--
-- Returns 1 released now, 0 not held: its lease had ended, or an earlier attempt of this
--         release gave it back (see release.lua: no record is kept for retries).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease_end = redis.call('ZSCORE', KEYS[1], ARGV[1])
if lease_end then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  if tonumber(lease_end) > now then
    redis.call(PUBLISH, ARGV[2], ARGV[3])
    return 1
  end
  return 0
end
return 0
