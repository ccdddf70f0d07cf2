-- Give a fair lock back: compare-and-delete, then wake ONLY the head of the queue (on its
-- own channel).
--
-- KEYS[1]  lock key
-- KEYS[2]  queue (list of waiter ids)
-- ARGV[1]  owner token
-- ARGV[2]  the waiters' channel prefix: the head is woken on <prefix><waiter id>
--
-- Returns 1 released now, 0 not held (see release.lua: no record is kept for retries).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  local head = redis.call('LINDEX', KEYS[2], 0)
  if head then
    -- Sent as "fair", not as this client: the head may be a waiter of this very client.
    redis.call('PUBLISH', ARGV[2] .. head, 'fair 1')
  end
  return 1
end
return 0
