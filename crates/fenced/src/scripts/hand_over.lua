-- Give a held lock straight to the next waiter of the same client, in one step: the lock never
-- becomes free in between, and the new holder gets a new fencing token (see core/handover.rs).
--
-- KEYS[1]  lock key   (string: owner token, PX = lease)
-- KEYS[2]  fence key  (stream: the last token; see fence.lua)
-- KEYS[3]  the successor's tombstone, <lock>:void:<successor> (exists only if abandoned)
-- KEYS[4]  the name's fair queue (list; a FairLock of the same name queues there)
-- ARGV[1]  owner token of the holder giving it up
-- ARGV[2]  owner token of the waiter taking it
-- ARGV[3]  the waiter's lease in ms
-- ARGV[4]  the fence's retention, in ms (what it outlives the last grant by)
-- ARGV[5]  the lock's release channel
--
-- Returns {1, token} handed over,
--         {0, 0}     not held by ARGV[1], or the successor was abandoned: nothing changed,
--         {0, 1}     somebody else waits (another client subscribed to the channel, or a
--                    fair waiter queued): nothing changed; the holder releases as usual, so
--                    that no process keeps a contended lock to itself; and when the fence
--                    key is not a fence (fence.lua): the waiter's own acquire then says so.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0, 0}
end
local waiting = redis.call('PUBSUB', 'NUMSUB', ARGV[5])[2] > 1
if not waiting then
  waiting = redis.call('LLEN', KEYS[4]) > 0
end
if waiting then
  return {0, 1}
end
if redis.call('MGET', KEYS[3])[1] then
  return {0, 0}
end
local token = next_token(KEYS[2], ARGV[4])
if not token then
  return {0, 1}
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {1, token}
