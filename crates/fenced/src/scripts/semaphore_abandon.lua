-- Give up a semaphore acquire attempt whose outcome the client never learned: give back the
-- permits it took, or leave a tombstone that voids it should it still arrive (see abandon.lua).
--
-- KEYS[1]  holders key
-- KEYS[2]  counts key
-- KEYS[3]  the attempt's tombstone: <holders>:void:<owner>
-- ARGV[1]  owner token
-- ARGV[2]  channel to publish a release on
-- ARGV[3]  message (see notify.rs)
-- ARGV[4]  how long the tombstone lives, in ms
--
-- Returns 1 the attempt had taken permits, now given back; 0 a tombstone now voids it.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call(PUBLISH, ARGV[2], ARGV[3])
  return 1
end
redis.call('SET', KEYS[3], 1, 'PX', ARGV[4])
return 0
