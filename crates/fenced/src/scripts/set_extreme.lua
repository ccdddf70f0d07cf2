-- Keep the maximum (or minimum) of the values ever offered, in one step: no read-then-write
-- window for a concurrent writer to slip into.
--
-- KEYS[1]  the key (a string holding a decimal integer)
-- ARGV[1]  the offered value (canonical decimal i64: no '+', no leading zeros)
-- ARGV[2]  'max' or 'min'
--
-- Returns the value stored afterwards, as a string.
--
-- Integers are compared as decimal strings (sign, then length, then bytes), exactly for every
-- i64, where Lua's doubles are exact only up to 2^53.
local function canonical(s)
  return s == '0' or string.match(s, '^%-?[1-9]%d*$') ~= nil
end
local function less(a, b)
  local a_neg, b_neg = a:sub(1, 1) == '-', b:sub(1, 1) == '-'
  if a_neg ~= b_neg then
    return a_neg
  end
  if a_neg then
    -- Both negative: the larger magnitude is the smaller number.
    a, b = b:sub(2), a:sub(2)
  end
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end
local current = redis.call('GET', KEYS[1])
if current then
  if not canonical(current) then
    return redis.error_reply('ERR the value at the key is not a decimal integer')
  end
  local keep
  if ARGV[2] == 'max' then
    keep = not less(current, ARGV[1])
  else
    keep = not less(ARGV[1], current)
  end
  if keep then
    return current
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
return ARGV[1]
