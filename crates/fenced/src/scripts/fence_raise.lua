-- Raise a fence to at least a token: the write-back step of Redlock's quorum fencing. The
-- token a Redlock acquisition hands out is the largest of its quorum's tokens; written back to
-- a majority before it is used, it makes every later grant on any majority larger still (the
-- two majorities share a node, whose next token is above it).
--
-- KEYS[1]  the fence (string: the last fencing token handed out)
-- ARGV[1]  the token to raise it to
-- ARGV[2]  fence retention, ms
--
-- Returns 1.
--
-- Tokens are below 2^53 (fence.lua), so comparing them as Lua numbers is exact. A fence of
-- another type reads as nil (MGET) and is overwritten, as an acquire would.
local current = redis.call('MGET', KEYS[1])[1]
if not current or (tonumber(current) or 0) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1
