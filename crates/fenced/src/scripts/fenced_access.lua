-- A resource's check: write fields, or read them, on behalf of a fencing token, only if the
-- token is at least the highest one the resource has seen; either way the token is recorded,
-- so every older token is refused from then on.
--
-- A read records its token too: a value derived from a read (stock - 1, balance + x) is only
-- safe if no older holder can still write after the read. Otherwise two holders read the
-- same stock, and both "sell". So a read with token T fences off every older token, even if
-- T's holder has not written yet.
--
-- KEYS[1]  resource data (hash)
-- KEYS[2]  resource fence (string: highest token seen, decimal)
-- ARGV[1]  the token (decimal, no leading zeros)
-- ARGV[2]  'write' or 'read'
-- ARGV[3..] writing: field, value, field, value, ...; reading: the fields to read
--
-- Returns {1, token}               written,
--         {1, value or false, ...} read: the token is current (and now recorded); the values,
--         {0, highest}             refused: a newer token was seen; nothing read or changed.
--
-- Tokens are compared as decimal strings, length first, then bytes: exact for every u64, where
-- Lua's doubles are exact only up to 2^53.
local token = ARGV[1]
local highest = redis.call('GET', KEYS[2])
if highest and (#token < #highest or (#token == #highest and token < highest)) then
  return {0, highest}
end
if ARGV[2] == 'read' then
  local reply = {1}
  if #ARGV > 2 then
    local values = redis.call('HMGET', KEYS[1], unpack(ARGV, 3))
    for i = 1, #ARGV - 2 do
      reply[i + 1] = values[i]
    end
  end
  if highest ~= token then
    redis.call('SET', KEYS[2], token)
  end
  return reply
end
-- Data first: if the write fails (say, the key holds another type), the fence must not move.
if #ARGV > 2 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 3))
end
redis.call('SET', KEYS[2], token)
return {1, token}
