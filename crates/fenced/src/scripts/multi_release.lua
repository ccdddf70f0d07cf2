-- Give back every lock of a multi-lock still held by this owner, and wake each one's waiters.
--
-- KEYS[1]    this release's record, on the first name (see release.lua)
-- KEYS[2..]  the lock keys
-- ARGV[1]  owner token
-- ARGV[2]  how long the record lives, in ms
-- ARGV[3]  message (see notify.rs)
-- ARGV[4..] the locks' channels, in the order of their keys
--
-- Returns 1 released (all that were still ours), 2 already released by this same release,
--         0 none of them was ours any more: nothing changed.
-- `free_all` comes from multi_free.lua, prepended when the script is built.
if free_all(ARGV[1], ARGV[3]) then
  redis.call('SET', KEYS[1], 1, 'PX', ARGV[2])
  return 1
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 2
end
return 0
