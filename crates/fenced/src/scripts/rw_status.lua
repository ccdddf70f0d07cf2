-- Read a read-write lock's live readers and waiting writers (read-only: ended leases and
-- lapsed registrations are skipped, not removed).
--
-- KEYS[1]  readers (zset: owner -> end of its lease, server ms)
-- KEYS[2]  waiting writers (zset: waiter id -> end of its registration, server ms)
--
-- Returns {live readers, live waiting writers}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {
  redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf'),
  redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf'),
}
