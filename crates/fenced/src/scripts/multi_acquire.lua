-- Take several locks at once, all or nothing, with one fencing token for all of them.
--
-- One script takes every name, so two callers locking {a, b} and {b, a} can never each hold
-- one and wait for the other. The token is greater than every token handed out before for
-- ANY of the names, so it fences each name's resources like a token of its own.
--
-- KEYS[1]          this attempt's tombstone (see abandon.lua), on the first name
-- KEYS[2..n+1]     the lock keys (strings: owner token, PX = lease)
-- KEYS[n+2..2n+1]  their fence keys (strings: the last token; see fence.lua)
-- ARGV[1]  owner token
-- ARGV[2]  lease in ms
-- ARGV[3]  the fences' retention, in ms (plus 1001 s: store_fence in fence.lua)
-- ARGV[4]  n, the number of names
--
-- Returns {1, token} all taken,
--         {0, pttl}  one of them is held (pttl of the first held one; -1 without expiry),
--         {0, -3}    the client already abandoned this attempt,
--         {0, -5, i} the lock key KEYS[i] holds another type than a string (another program
--                    wrote it).
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
-- One MGET for every fence; the token is above the highest of them (and the server clock).
local fences = redis.call('MGET', unpack(KEYS, n + 2, 2 * n + 1))
local highest = false
for i = 1, n do
  local last = tonumber(fences[i] or '0') or 0
  if not highest or last > highest then
    highest = last
  end
end
-- next_token reads the fence as text.
local token = next_token(string.format('%.0f', highest), redis.call('TIME'))
for i = 2, n + 1 do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  redis.call('SET', KEYS[i + n], token, 'PX', ARGV[3])
end
return {1, token}
