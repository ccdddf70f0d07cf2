-- Take permits of a semaphore whose permits are leased: each holder's permits come back when
-- its lease ends, so a crashed holder cannot leak them. Lease ends are Redis server time
-- (TIME), never a client's clock.
--
-- KEYS[1]  holders key (zset: owner token -> end of its lease, server ms)
-- KEYS[2]  counts key  (hash: owner token -> permits it holds)
-- KEYS[3]  fence key   (stream: the last token handed out; see fence.lua)
-- KEYS[4]  this attempt's tombstone, <holders>:void:<owner> (exists only if abandoned)
-- ARGV[1]  owner token
-- ARGV[2]  permits wanted (>= 1)
-- ARGV[3]  permits in all (the caller's limit)
-- ARGV[4]  lease in ms
-- ARGV[5]  the fence's retention, in ms (what it outlives the last grant by)
-- ARGV[6]  optional: the token Redlock proposes (see next_token in fence.lua)
--
-- Returns {1, token} granted,
--         {0, ms}    not enough free: ms until the earliest holder's lease ends (-1: none holds,
--                    the request is larger than the limit allows right now),
--         {0, -3}    the client already abandoned this attempt,
--         {0, -5, 3} the fence key is not a fence (fence.lua): nothing changed.
--
-- The limit travels with each request: a caller is admitted when the permits held by live
-- holders plus its own fit under ITS limit. Lowering the limit never revokes a held permit;
-- it only stops admitting until enough come back.
if redis.call('DEL', KEYS[4]) == 1 then
  return {0, -3}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, dead in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
  redis.call('HDEL', KEYS[2], dead)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local used = 0
for _, n in ipairs(redis.call('HVALS', KEYS[2])) do
  used = used + tonumber(n)
end
local wanted = tonumber(ARGV[2])
if used + wanted > tonumber(ARGV[3]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if first[2] then
    return {0, math.max(tonumber(first[2]) - now, 0)}
  end
  return {0, -1}
end
local token = next_token(KEYS[3], ARGV[5], ARGV[6])
if not token then
  return {0, -5, 3}
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], wanted)
-- Both keys live exactly until the latest lease in them ends (scores are server ms, the
-- clock PEXPIREAT counts in), so nothing is left behind.
local last_end = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last_end[2])
redis.call('PEXPIREAT', KEYS[2], last_end[2])
return {1, token}
