-- Give back one hold of a reentrant lock; the last one frees the lock and wakes the waiters.
--
-- KEYS[1]  lock key
-- KEYS[2]  holds key
-- ARGV[1]  owner token
-- ARGV[2]  this hold's id
-- ARGV[3]  channel to publish the release on
-- ARGV[4]  message (see notify.rs)
--
-- Returns 1 the last hold: the lock is free now,
--         3 this hold is given back; the owner's other holds keep the lock (also on a retry
--           of such a release: the hold is gone, the owner still holds the lock),
--         0 not held by this owner: nothing changed (see release.lua: a retry of the release
--           of the last hold lands here, and the client tells it from a lost lease).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local last_hold = redis.call('HDEL', KEYS[2], 'h:' .. ARGV[2]) == 1
if last_hold then
  last_hold = redis.call('HLEN', KEYS[2]) <= 1
end
if last_hold then
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.call(PUBLISH, ARGV[3], ARGV[4])
  return 1
end
return 3
