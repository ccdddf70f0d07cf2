-- Write to a resource only if the writer's fencing token is at least the highest one the
-- resource has accepted; remember the token when accepted.
--
-- KEYS[1]  resource data (hash)
-- KEYS[2]  resource fence (string: highest accepted token, decimal)
-- ARGV[1]  the writer's fencing token (decimal, no leading zeros)
-- ARGV[2..] field, value, field, value, ...
--
-- Returns {1, token}   accepted and written
--         {0, highest} refused: a newer holder has written already; nothing changed.
--
-- `older` comes from tokens.lua, prepended when the script is built (scripts/mod.rs).
-- Tokens are compared as decimal strings (length first, then bytes), which is exact for every
-- u64, where Lua's doubles are exact only up to 2^53.
local highest = redis.call('GET', KEYS[2])
if highest and older(ARGV[1], highest) then
  return {0, highest}
end
-- Data first: if the write fails (say, the key holds another type), the fence must not move.
if #ARGV > 1 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 2))
end
redis.call('SET', KEYS[2], ARGV[1])
return {1, ARGV[1]}
