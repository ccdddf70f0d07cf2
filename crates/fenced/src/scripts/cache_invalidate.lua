-- Drop a cached entry and raise its lock's fence, so that a compute already running (which
-- may have read the data before the change that caused this invalidation) cannot store its
-- value: cache_store.lua refuses tokens below the fence.
--
-- KEYS[1]  the cached entry (hash)
-- KEYS[2]  the entry lock's fence (stream; see fence.lua)
-- ARGV[1]  the fence's retention, in ms
--
-- Returns 1 if an entry was dropped, 0 if there was none.
--
-- `next_token` comes from fence.lua, prepended when the script is built (scripts/mod.rs): the
-- raised fence is a token like any grant's, so later grants stay above it.
-- A key that is not a fence (another program's) is left as it is: the entry goes all the same.
next_token(KEYS[2], ARGV[1])
return redis.call('DEL', KEYS[1])
