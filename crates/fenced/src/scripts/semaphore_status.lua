-- Read a semaphore's live holders (read-only: expired leases are skipped, not removed).
--
-- KEYS[1]  holders key (zset: owner -> end of lease, server ms)
-- KEYS[2]  counts key  (hash: owner -> permits)
--
-- Returns {permits held by live holders, live holders, ms until the earliest lease ends or -1}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
local used = 0
local first = -1
for i = 1, #live, 2 do
  used = used + (tonumber(redis.call('HGET', KEYS[2], live[i]) or '0') or 0)
  if first < 0 then
    first = tonumber(live[i + 1]) - now
  end
end
return {used, #live / 2, first}
