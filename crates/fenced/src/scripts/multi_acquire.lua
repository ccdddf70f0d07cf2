-- Take several locks at once, all or nothing, with one fencing token for all of them.
--
-- One script takes every name, so two callers locking {a, b} and {b, a} can never each hold
-- one and wait for the other. The token is greater than every token handed out before for
-- ANY of the names, so it fences each name's resources like a token of its own.
--
-- KEYS[1]          this attempt's tombstone (see abandon.lua), on the first name
-- KEYS[2..n+1]     the lock keys (strings: owner token, PX = lease)
-- KEYS[n+2..2n+1]  their fence keys (streams: the last token; see fence.lua)
-- ARGV[1]  owner token
-- ARGV[2]  lease in ms
-- ARGV[3]  the fences' retention, in ms
-- ARGV[4]  n, the number of names
--
-- Returns {1, token} all taken,
--         {0, pttl}  one of them is held (pttl of the first held one; -1 without expiry),
--         {0, -3}    the client already abandoned this attempt,
--         {0, -5, i} the lock key KEYS[i] holds another type than a string (another program
--                    wrote it), or the fence key KEYS[i] is not a fence (fence.lua): no lock
--                    is taken.
if redis.call('DEL', KEYS[1]) == 1 then
  return {0, -3}
end
local n = tonumber(ARGV[4])
for i = 2, n + 1 do
  local pttl = redis.call('PTTL', KEYS[i])
  if pttl ~= -2 then
    -- The key exists: MGET answers nil for another type only.
    if not redis.call('MGET', KEYS[i])[1] then
      return {0, -5, i}
    end
    return {0, pttl}
  end
end
-- Each fence's next token; the grant's is the highest of them, which the others are raised to,
-- so every later grant of any of the names is above it.
local tokens = {}
local token = false
for i = n + 2, 2 * n + 1 do
  tokens[i] = next_token(KEYS[i], ARGV[3])
  if not tokens[i] then
    return {0, -5, i}
  end
  if not token or tonumber(tokens[i]) > tonumber(token) then
    token = tokens[i]
  end
end
for i = n + 2, 2 * n + 1 do
  if tokens[i] ~= token then
    raise_fence(KEYS[i], token, ARGV[3])
  end
end
for i = 2, n + 1 do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return {1, token}
