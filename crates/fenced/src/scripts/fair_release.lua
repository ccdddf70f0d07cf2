-- Give a fair lock back: compare-and-delete, then wake ONLY the head of the queue (on its
-- own channel), and keep a record of this release for its retries (see release.lua).
--
-- KEYS[1]  lock key
-- KEYS[2]  this release's record
-- KEYS[3]  queue (list of waiter ids)
-- ARGV[1]  owner token
-- ARGV[2]  the waiters' channel prefix: the head is woken on <prefix><waiter id>
-- ARGV[3]  how long the record lives, in ms
--
-- Returns 1 released now, 2 already released by this owner, 0 not held.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], 1, 'PX', ARGV[3])
  local head = redis.call('LINDEX', KEYS[3], 0)
  if head then
    -- Sent as "fair", not as this client: the head may be a waiter of this very client.
    redis.call('PUBLISH', ARGV[2] .. head, 'fair 1')
  end
  return 1
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 2
end
return 0
