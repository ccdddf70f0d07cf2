-- Give back every lock of a multi-lock still held by this owner, and wake each one's waiters.
--
-- KEYS[1..]  the lock keys
-- ARGV[1]  owner token
-- ARGV[2]  message (see notify.rs)
-- ARGV[3..] the locks' channels, in the order of their keys
--
-- Returns 1 released (all that were still ours),
--         0 none of them was ours any more: nothing changed (see release.lua: no record is
--           kept for retries).
-- `free_all` comes from multi_free.lua, prepended when the script is built.
if free_all(ARGV[1], ARGV[2], 1, 3) then
  return 1
end
return 0
