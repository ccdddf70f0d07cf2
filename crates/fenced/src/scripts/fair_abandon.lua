-- Give up on a fair lock: leave the queue at once, and void an attempt of unknown outcome
-- (release the lock if it took it, or leave a tombstone; see abandon.lua).
--
-- KEYS[1]  lock key
-- KEYS[2]  the attempt's tombstone
-- KEYS[3]  queue (list of waiter ids)
-- KEYS[4]  registrations (hash)
-- ARGV[1]  owner token of the attempt
-- ARGV[2]  waiter id
-- ARGV[3]  the waiters' channel prefix
-- ARGV[4]  how long the tombstone lives, in ms
--
-- Returns 1 the attempt had taken the lock, now released (and the next head woken);
--         0 it had not: a tombstone now voids it.
redis.call('LREM', KEYS[3], 0, ARGV[2])
redis.call('HDEL', KEYS[4], ARGV[2])
-- `free_fair` comes from fair_free.lua, prepended when the script is built.
if free_fair(KEYS[1], KEYS[3], ARGV[1], ARGV[3]) then
  return 1
end
redis.call('SET', KEYS[2], 1, 'PX', ARGV[4])
return 0
