-- Give back every lock of a multi-lock still held by this owner, and wake each one's waiters;
-- for an attempt whose outcome the client never learned (see abandon.lua), when none was
-- held, leave a tombstone that voids it should it still arrive.
--
-- KEYS[1]    the attempt's tombstone, on the first name (written only when abandoning)
-- KEYS[2..]  the lock keys
-- ARGV[1]  owner token
-- ARGV[2]  how long the tombstone lives, in ms; empty for a release (no tombstone)
-- ARGV[3]  message (see notify.rs)
-- ARGV[4..] the locks' channels, in the order of their keys
--
-- Returns 1 released (all that were still ours),
--         0 none of them was ours any more: nothing changed but the tombstone, when asked
--           (see release.lua: no record is kept for retries).
local freed = false
for i = 2, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    redis.call(PUBLISH, ARGV[i + 2], ARGV[3])
    freed = true
  end
end
if freed then
  return 1
end
if ARGV[2] ~= '' then
  redis.call('SET', KEYS[1], 1, 'PX', ARGV[2])
end
return 0
