-- Break a lock whoever holds it (operators' break-glass), and wake the waiters.
--
-- KEYS[1]  lock key
-- KEYS[2]  a reentrant lock's holds (deleted with it)
-- ARGV[1]  channel to publish the release on
-- ARGV[2]  message: '<client id> <wake>'
--
-- Returns the owner token that held it, or false when the lock was free.
local owner = redis.call('GET', KEYS[1])
if not owner then
  return false
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call(PUBLISH, ARGV[1], ARGV[2])
return owner
