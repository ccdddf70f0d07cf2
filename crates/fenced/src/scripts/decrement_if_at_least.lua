-- Take n items from a stock only if that leaves it at zero or more: the seckill purchase in
-- one step, with no oversold item possible.
--
-- KEYS[1]  the stock (a string holding a decimal integer; a missing key is a stock of 0)
-- ARGV[1]  n, a positive integer
--
-- Returns {1, stock left} when taken, {0, stock} when there were fewer than n.
local raw = redis.call('GET', KEYS[1]) or '0'
-- Only plain decimal integers within +-10^15: exact as Lua numbers (below 2^53), and what
-- DECRBY accepts (tonumber alone would take '0x10', ' 7' or '2.5').
if not string.match(raw, '^%-?%d+$') or #raw > 17 or math.abs(tonumber(raw)) > 1e15 then
  return redis.error_reply('ERR the stock is not a decimal integer within 10^15')
end
local stock = tonumber(raw)
local n = tonumber(ARGV[1])
if stock < n then
  return {0, stock}
end
return {1, redis.call('DECRBY', KEYS[1], n)}
