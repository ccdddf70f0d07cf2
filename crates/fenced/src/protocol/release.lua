-- Give a lease back: compare-and-delete, then wake the waiters.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence key
-- ARGV[1]  owner token
-- ARGV[2]  channel to publish the release on
-- ARGV[3]  message: the releasing client's id, so that client can skip its own echo
-- ARGV[4]  fence key retention in ms
--
-- Returns 1 released now,
--         2 already released by this owner (a retry whose first reply was lost),
--         0 not held by this owner (expired, broken, or held by somebody else): nothing changed.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  -- Remember the last releaser, so that a retry of this same release can tell
  -- "my first attempt worked" from "my lease was gone".
  redis.call('HSET', KEYS[2], 'released', ARGV[1])
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
if redis.call('HGET', KEYS[2], 'released') == ARGV[1] then
  return 2
end
return 0
