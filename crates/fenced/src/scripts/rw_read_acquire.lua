-- Take a read lease of a read-write lock: many readers, or one writer. Writer-preferring:
-- while a writer waits, new readers wait too, so a stream of readers cannot starve it.
--
-- KEYS[1]  the lock key (string: the writer's owner token; the same key a plain lock uses)
-- KEYS[2]  readers (zset: owner -> end of its lease, server ms)
-- KEYS[3]  readers' counts (hash: owner -> 1; shared with the semaphore scripts that renew
--          and release readers)
-- KEYS[4]  waiting writers (zset: waiter id -> when its wait registration ends, server ms)
-- KEYS[5]  fence key (stream: the last token; see fence.lua)
-- KEYS[6]  this attempt's tombstone
-- ARGV[1]  owner token
-- ARGV[2]  lease in ms
-- ARGV[3]  the fence's retention, in ms
--
-- Returns {1, token} granted (a token above every earlier grant, the writers' included),
--         {0, ms}    a writer holds or waits: ms until that may change (-1 unknown),
--         {0, -3}    the client already abandoned this attempt,
--         {0, -5, 1} the lock key holds another type than a string (another program wrote
--                    it),
--         {0, -5, 5} the fence key is not a fence (fence.lua); nothing is registered.
if redis.call('DEL', KEYS[6]) == 1 then
  return {0, -3}
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl ~= -2 then
  -- The key exists: MGET answers nil for another type only.
  if not redis.call('MGET', KEYS[1])[1] then
    return {0, -5, 1}
  end
  return {0, pttl}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local writer = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
if writer[2] then
  return {0, math.max(tonumber(writer[2]) - now, 0)}
end
for _, dead in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
  redis.call('HDEL', KEYS[3], dead)
end
local token = next_token(KEYS[5], ARGV[3])
if not token then
  return {0, -5, 5}
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], 1)
local last_end = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[2], last_end[2])
redis.call('PEXPIREAT', KEYS[3], last_end[2])
return {1, token}
