-- Give a lease back: compare-and-delete, then wake the waiters.
--
-- KEYS[1]  lock key
-- KEYS[2]  this release's record: <lock>:rel:<owner>
-- ARGV[1]  owner token
-- ARGV[2]  channel to publish the release on
-- ARGV[3]  message: the releasing client's id, so that client can skip its own echo
-- ARGV[4]  how long the record lives, in ms: the window in which the client may retry
--
-- Returns 1 released now,
--         2 already released by this owner (a retry whose first reply was lost),
--         0 not held by this owner (expired, broken, or held by somebody else): nothing changed.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  -- A record of this very release, so that a retry can tell "my first attempt worked" from
  -- "my lease was gone", however many other holders came and went in between.
  redis.call('SET', KEYS[2], 1, 'PX', ARGV[4])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 2
end
return 0
