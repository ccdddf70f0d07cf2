-- Shared by the fair lock's acquire and hand-over; prepended to them (scripts/mod.rs).
--
-- live_head(queue, registrations, now): takes off the head of `queue` the waiters whose
-- registration (`registrations`: waiter id -> end, server ms) ended by `now`, and returns the
-- first waiter still registered, or false when none is left.
local function live_head(queue, registrations, now)
  while true do
    local head = redis.call('LINDEX', queue, 0)
    if not head then
      return false
    end
    local ends = tonumber(redis.call('HGET', registrations, head) or '0')
    if ends > now then
      return head
    end
    redis.call('LPOP', queue)
    redis.call('HDEL', registrations, head)
  end
end
