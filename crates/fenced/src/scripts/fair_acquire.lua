-- Take a fair lock: FIFO among waiters of every process. A waiter queues by its id (the
-- same for every attempt of one acquire) and may take the lock only at the head of the
-- queue. Its place lasts until its registration ends (server TIME, renewed by every
-- attempt), so a waiter that died leaves the queue by itself; never by comparing clocks.
--
-- KEYS[1]  the lock key (string: owner token; the plain lock's key)
-- KEYS[2]  queue (list of waiter ids, oldest first)
-- KEYS[3]  registrations (hash: waiter id -> end of its registration, server ms)
-- KEYS[4]  fence key (string: the last token; see fence.lua)
-- KEYS[5]  this attempt's tombstone
-- ARGV[1]  owner token
-- ARGV[2]  lease in ms
-- ARGV[3]  the fence's retention, in ms (plus 1001 s: store_fence in fence.lua)
-- ARGV[4]  waiter id
-- ARGV[5]  how long a registration lasts, in ms (0: a try that never queues)
-- ARGV[6]  the first half of every owner a holder of the same client hands the lock to this
--          waiter under (fair_hand_over.lua), or '' for none
--
-- Returns {1, token} granted, {0, ms} wait (ms until the holder's lease ends, -1 unknown:
--         also when the lock was just handed to this waiter, whose client delivers it),
--         {0, -3} the client already abandoned this attempt,
--         {0, -5, 1} the lock key holds another type than a string (another program wrote
--         it); nothing is queued.
if redis.call('DEL', KEYS[5]) == 1 then
  return {0, -3}
end
-- Handed to this waiter already: it left the queue, and must not join it again.
if ARGV[6] ~= '' then
  -- MGET: false for a key of another type, which the refusal below names.
  local holder = redis.call('MGET', KEYS[1])[1]
  if holder and string.sub(holder, 1, #ARGV[6]) == ARGV[6] then
    return {0, -1}
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Waiters whose registration ended leave from the head (`live_head`: fair_queue.lua).
local head = live_head(KEYS[2], KEYS[3], now)
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 and (not head or head == ARGV[4]) then
  if head then
    redis.call('LPOP', KEYS[2])
    redis.call('HDEL', KEYS[3], ARGV[4])
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  local fence = redis.call('MGET', KEYS[4])[1]
  local token = next_token(fence, t)
  store_fence(KEYS[4], token, fence, ARGV[3])
  return {1, token}
end
-- The key exists: MGET answers nil for another type only.
if pttl ~= -2 and not redis.call('MGET', KEYS[1])[1] then
  return {0, -5, 1}
end
local registration = tonumber(ARGV[5])
if registration > 0 then
  if redis.call('HSET', KEYS[3], ARGV[4], now + registration) == 1 then
    redis.call('RPUSH', KEYS[2], ARGV[4])
  end
  redis.call('PEXPIRE', KEYS[2], registration * 2)
  redis.call('PEXPIRE', KEYS[3], registration * 2)
end
if pttl == -2 then
  return {0, -1}
end
return {0, pttl}
