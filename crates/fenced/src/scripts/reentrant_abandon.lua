-- Give up a reentrant acquire attempt whose outcome the client never learned: give back the
-- hold it took, or leave a tombstone that voids it should it still arrive (see abandon.lua).
--
-- KEYS[1]  lock key
-- KEYS[2]  holds key
-- KEYS[3]  the attempt's tombstone: <lock>:void:<owner>:<hold id>
-- ARGV[1]  owner token
-- ARGV[2]  the attempt's hold id
-- ARGV[3]  channel to publish a release on
-- ARGV[4]  message (see notify.rs)
-- ARGV[5]  how long the tombstone lives, in ms
--
-- Returns 1 the attempt had taken a hold, now given back (the lock freed if it was the last),
--         0 it had not: a tombstone now voids it.
local ours = redis.call('GET', KEYS[1]) == ARGV[1]
if ours then
  ours = redis.call('HDEL', KEYS[2], 'h:' .. ARGV[2]) == 1
end
if ours then
  if redis.call('HLEN', KEYS[2]) <= 1 then
    redis.call('DEL', KEYS[1], KEYS[2])
    redis.call(PUBLISH, ARGV[3], ARGV[4])
  end
  return 1
end
redis.call('SET', KEYS[3], 1, 'PX', ARGV[5])
return 0
