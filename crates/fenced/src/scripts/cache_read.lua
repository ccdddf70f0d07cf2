-- Read a cache entry and its remaining life in one atomic step (a snapshot: the fields and
-- the ttl belong to the same version of the entry).
--
-- KEYS[1]  the cached entry (hash: v = value, d = compute µs, s = stale grace ms)
--
-- Returns {pttl, v, d, s}: PTTL of the entry (-2 when missing, -1 without expiry), then
--         each field or nil.
--
-- A script rather than MULTI/EXEC: it runs on the shared connection, where a refused MULTI
-- (an ACL without it) would derail redis-rs's reply counting for everybody on it.
local fields = redis.call('HMGET', KEYS[1], 'v', 'd', 's')
return {redis.call('PTTL', KEYS[1]), fields[1], fields[2], fields[3]}
