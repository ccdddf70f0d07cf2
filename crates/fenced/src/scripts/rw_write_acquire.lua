-- Take the write lease of a read-write lock: no writer and no live reader. A writer that
-- cannot take it registers as waiting (so new readers wait behind it) until ARGV[5] ms from
-- now; every attempt renews that registration, and a writer that gives up is forgotten
-- when it ends.
--
-- KEYS[1]  the lock key (string: owner token, PX = lease)
-- KEYS[2]  readers (zset: owner -> end of its lease, server ms)
-- KEYS[3]  waiting writers (zset: waiter id -> end of its registration, server ms)
-- KEYS[4]  fence key (stream: the last token; see fence.lua)
-- KEYS[5]  this attempt's tombstone
-- ARGV[1]  owner token
-- ARGV[2]  lease in ms
-- ARGV[3]  the fence's retention, in ms
-- ARGV[4]  this writer's waiter id (the same for every attempt of one acquire)
-- ARGV[5]  how long a wait registration lasts, in ms (0: do not register; a try that never
--          waits)
--
-- Returns {1, token} granted (a token above every earlier grant, the readers' included),
--         {0, ms}    a writer or live readers hold it: ms until the earliest may end,
--         {0, -3}    the client already abandoned this attempt,
--         {0, -5, 1} the lock key holds another type than a string (another program wrote
--                    it); nothing is registered,
--         {0, -5, 4} the fence key is not a fence (fence.lua); the writer stays registered.
if redis.call('DEL', KEYS[5]) == 1 then
  return {0, -3}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function wait(ms)
  if tonumber(ARGV[5]) > 0 then
    redis.call('ZADD', KEYS[3], now + tonumber(ARGV[5]), ARGV[4])
    local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
    redis.call('PEXPIREAT', KEYS[3], last[2])
  end
  return {0, ms}
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl ~= -2 then
  -- The key exists: MGET answers nil for another type only.
  if not redis.call('MGET', KEYS[1])[1] then
    return {0, -5, 1}
  end
  return wait(pttl)
end
local reader = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if reader[2] then
  return wait(math.max(tonumber(reader[2]) - now, 0))
end
local token = next_token(KEYS[4], ARGV[3])
if not token then
  return {0, -5, 4}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[4])
return {1, token}
