-- Arm a latch with a count, unless it is armed and still counting.
--
-- KEYS[1]  latch key
-- ARGV[1]  the count (>= 1)
-- ARGV[2]  the latch's lifetime in ms: the key expires by itself, open or not
--
-- Returns 1 armed (the latch was absent or open at 0; waiters from now on wait),
--         0 refused: it is armed and counting (its count is left as it was).
local left = tonumber(redis.call('GET', KEYS[1]) or '0')
if left ~= nil and left > 0 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
