-- Set a value only if it is what the caller last saw.
--
-- KEYS[1]  the key (a string)
-- ARGV[1]  'absent' (the key must not exist) or 'equals' (it must hold ARGV[2])
-- ARGV[2]  the expected value (with 'equals')
-- ARGV[3]  the new value
--
-- Returns {1} when set (any ttl on the key is kept),
--         {0, current} when the value differed ({0} when the key does not exist).
local current = redis.call('GET', KEYS[1])
local matches
if ARGV[1] == 'absent' then
  matches = (current == false)
else
  matches = (current == ARGV[2])
end
if matches then
  redis.call('SET', KEYS[1], ARGV[3], 'KEEPTTL')
  return {1}
end
if current then
  return {0, current}
end
return {0}
