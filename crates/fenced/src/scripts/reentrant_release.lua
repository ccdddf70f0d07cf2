-- Give back one hold of a reentrant lock; the last one frees the lock and wakes the waiters.
--
-- KEYS[1]  lock key
-- KEYS[2]  holds key
-- KEYS[3]  this hold's release record: <lock>:rel:<owner>:<hold id>
-- ARGV[1]  owner token
-- ARGV[2]  this hold's id
-- ARGV[3]  channel to publish the release on
-- ARGV[4]  message (see notify.rs)
-- ARGV[5]  how long the record lives, in ms
--
-- Returns 1 the last hold: the lock is free now,
--         3 this hold is given back; the owner's other holds keep the lock (also on a
--           retry of such a release),
--         2 the last hold, already given back by this same release (a retry whose first
--           reply was lost),
--         0 not held by this owner: nothing changed.
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('HDEL', KEYS[2], 'h:' .. ARGV[2]) == 1 then
  if redis.call('HLEN', KEYS[2]) <= 1 then
    redis.call('DEL', KEYS[1], KEYS[2])
    redis.call('SET', KEYS[3], 'freed', 'PX', ARGV[5])
    redis.call('PUBLISH', ARGV[3], ARGV[4])
    return 1
  end
  redis.call('SET', KEYS[3], 'kept', 'PX', ARGV[5])
  return 3
end
-- A retry: the record says what the first attempt did.
local record = redis.call('GET', KEYS[3])
if record == 'freed' then
  return 2
elseif record == 'kept' then
  return 3
end
return 0
