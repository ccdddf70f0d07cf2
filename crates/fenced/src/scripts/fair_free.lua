-- Shared by the fair lock's release and abandon; prepended to them (scripts/mod.rs).
--
-- free_fair(lock, queue, owner, prefix): if `owner` holds `lock`, deletes it and wakes ONLY
-- the queue's head, on its own channel <prefix><waiter id>. The message is sent as "fair",
-- not as this client: the head may be a waiter of this very client. True if it was held.
local function free_fair(lock, queue, owner, prefix)
  if redis.call('GET', lock) ~= owner then
    return false
  end
  redis.call('DEL', lock)
  local head = redis.call('LINDEX', queue, 0)
  if head then
    redis.call(PUBLISH, prefix .. head, 'fair 1')
  end
  return true
end
