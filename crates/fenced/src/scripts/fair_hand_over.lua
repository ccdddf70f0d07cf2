-- Give a held fair lock straight to the head of its queue, when the head is a waiter of this
-- same client (core/handover.rs): the lock never becomes free in between, and the new holder
-- gets a new fencing token. When the head is anyone else (or the successor was abandoned),
-- the lock is released as fair_release.lua does, in this same step: no second round trip.
--
-- KEYS[1]  lock key   (string: owner token, PX = lease)
-- KEYS[2]  queue      (list of waiter ids, oldest first)
-- KEYS[3]  registrations (hash: waiter id -> end of its registration, server ms)
-- KEYS[4]  fence key  (stream: the last token; see fence.lua)
-- KEYS[5]  the successor's tombstone, <lock>:void:<successor> (exists only if abandoned)
-- ARGV[1]  owner token of the holder giving it up
-- ARGV[2]  owner token of the waiter taking it
-- ARGV[3]  the waiter's lease in ms
-- ARGV[4]  the fence's retention, in ms
-- ARGV[5]  the waiter's id in the queue
-- ARGV[6]  the waiters' channel prefix: a head is woken on <prefix><waiter id>
--
-- Returns {1, token} handed over,
--         {0, 0}     not held by ARGV[1]: nothing changed,
--         {0, 2}     released as usual: the head (another client's, or gone) was woken; also
--                    when the fence key is not a fence (fence.lua), which the head's own
--                    acquire then names.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0, 0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Waiters whose registration ended leave from the head (`live_head`: fair_queue.lua).
local head = live_head(KEYS[2], KEYS[3], now)
local token = head == ARGV[5] and redis.call('EXISTS', KEYS[5]) == 0
  and next_token(KEYS[4], ARGV[4])
if token then
  redis.call('LPOP', KEYS[2])
  redis.call('HDEL', KEYS[3], head)
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return {1, token}
end
redis.call('DEL', KEYS[1])
if head then
  redis.call(PUBLISH, ARGV[6] .. head, 'fair 1')
end
return {0, 2}
