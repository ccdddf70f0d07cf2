-- Read fields of a resource on behalf of a fencing token, and fence off every older token.
--
-- A value derived from a read (stock - 1, balance + x) is only safe if no older holder can
-- still write after the read: otherwise two holders read the same stock, and both "sell".
-- So a read with token T raises the resource's fence to T: from then on every write with a
-- token older than T is refused, even if T's holder has not written yet.
--
-- KEYS[1]  resource data (hash)
-- KEYS[2]  resource fence (string: highest token seen, decimal)
-- ARGV[1]  the reader's fencing token (decimal, no leading zeros)
-- ARGV[2..] the fields to read
--
-- Returns {1, value or false, ...} the token is current (and now recorded); the values,
--         {0, highest}             refused: a newer token was seen; nothing read or changed.
--
-- `older` comes from tokens.lua, prepended when the script is built (scripts/mod.rs).
-- Tokens are compared as decimal strings (length first, then bytes), exact for every u64.
local highest = redis.call('GET', KEYS[2])
if highest and older(ARGV[1], highest) then
  return {0, highest}
end
local values = {}
if #ARGV > 1 then
  values = redis.call('HMGET', KEYS[1], unpack(ARGV, 2))
end
if highest ~= ARGV[1] then
  redis.call('SET', KEYS[2], ARGV[1])
end
local reply = {1}
for i = 1, #ARGV - 1 do
  reply[i + 1] = values[i]
end
return reply
