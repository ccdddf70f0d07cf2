-- Give up a multi-lock attempt whose outcome the client never learned (see abandon.lua):
-- release what it took, or leave a tombstone that voids it should it still arrive.
--
-- KEYS[1]    the attempt's tombstone, on the first name
-- KEYS[2..]  the lock keys
-- ARGV[1]  owner token
-- ARGV[2]  how long the tombstone lives, in ms
-- ARGV[3]  message (see notify.rs)
-- ARGV[4..] the locks' channels
--
-- Returns 1 the attempt had taken the locks, now released; 0 a tombstone voids it.
-- `free_all` comes from multi_free.lua, prepended when the script is built.
if free_all(ARGV[1], ARGV[3], 2, 4) then
  return 1
end
redis.call('SET', KEYS[1], 1, 'PX', ARGV[2])
return 0
