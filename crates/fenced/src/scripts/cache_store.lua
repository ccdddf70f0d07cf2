-- Store a computed cache entry, if no newer computer or invalidation came first; wake the
-- waiters of every process.
--
-- KEYS[1]  the cached entry (hash: v = value, absent for a cached "no value"; d = compute µs;
--          s = stale grace ms)
-- KEYS[2]  the entry lock's fence (stream: the last fencing token handed out or raised by an
--          invalidation; see fence.lua)
-- ARGV[1]  the computer's fencing token
-- ARGV[2]  the entry's physical lifetime, ms (fresh period + stale grace)
-- ARGV[3]  how long the compute took, µs (for early refresh)
-- ARGV[4]  stale grace, ms
-- ARGV[5]  channel to publish on (the entry lock's release channel)
-- ARGV[6]  message to publish
-- ARGV[7]  the value; absent for a negative entry
--
-- Returns 1  stored
--         0  refused: the fence passed the token (a newer grant, or an invalidation, came
--            after this computer's grant), so its value may be older than what is known now;
--            or the fence key is not a fence (fence.lua).
--
-- Tokens are below 2^53 (fence.lua), so comparing them as Lua numbers is exact.
local fence = fence_last(KEYS[2])
if not fence or tonumber(fence) > tonumber(ARGV[1]) then
  return 0
end
redis.call('DEL', KEYS[1])
if ARGV[7] then
  redis.call('HSET', KEYS[1], 'd', ARGV[3], 's', ARGV[4], 'v', ARGV[7])
else
  redis.call('HSET', KEYS[1], 'd', ARGV[3], 's', ARGV[4])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call(PUBLISH, ARGV[5], ARGV[6])
return 1
