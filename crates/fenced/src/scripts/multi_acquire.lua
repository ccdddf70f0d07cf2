-- Take several locks at once, all or nothing, with one fencing token for all of them.
--
-- One script takes every name, so two callers locking {a, b} and {b, a} can never each hold
-- one and wait for the other. The token is greater than every token handed out before for
-- ANY of the names, so it fences each name's resources like a token of its own.
--
-- KEYS[1]          this attempt's tombstone (see abandon.lua), on the first name
-- KEYS[2..n+1]     the lock keys (strings: owner token, PX = lease)
-- KEYS[n+2..2n+1]  their fence keys (hash: last)
-- ARGV[1]  owner token
-- ARGV[2]  lease in ms
-- ARGV[3]  how long the fence keys outlive the last grant, in ms
-- ARGV[4]  n, the number of names
--
-- Returns {1, token} all taken,
--         {0, pttl}  one of them is held (pttl of the first held one; -1 without expiry),
--         {0, -3}    the client already abandoned this attempt.
if redis.call('DEL', KEYS[1]) == 1 then
  return {0, -3}
end
local n = tonumber(ARGV[4])
for i = 2, n + 1 do
  local pttl = redis.call('PTTL', KEYS[i])
  if pttl ~= -2 then
    return {0, pttl}
  end
end
local now = redis.call('TIME')
local highest = tonumber(now[1]) * 1000000 + tonumber(now[2]) - 1
for i = n + 2, 2 * n + 1 do
  local last = tonumber(redis.call('HGET', KEYS[i], 'last') or '0') or 0
  if last > highest then
    highest = last
  end
end
local token = string.format('%.0f', highest + 1)
for i = 2, n + 1 do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  redis.call('HSET', KEYS[i + n], 'last', token)
  redis.call('PEXPIRE', KEYS[i + n], ARGV[3])
end
return {1, token}
