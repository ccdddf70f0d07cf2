-- Count a latch down by one; the count reaching 0 opens it and wakes every waiter.
--
-- KEYS[1]  latch key (string: the count left, PX = the latch's lifetime)
-- ARGV[1]  channel to publish the opening on
-- ARGV[2]  message (see notify.rs: it wakes all)
--
-- Returns the count left (0: open now or already), or -1 when the latch does not exist
-- (never armed, or expired). The key keeps its expiry: counting down never prolongs it.
local left = tonumber(redis.call('GET', KEYS[1]) or '-1')
if left == nil or left < 0 then
  return -1
end
if left == 0 then
  return 0
end
left = redis.call('DECR', KEYS[1])
if left == 0 then
  redis.call(PUBLISH, ARGV[1], ARGV[2])
end
return left
