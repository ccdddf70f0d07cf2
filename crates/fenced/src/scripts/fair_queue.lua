-- Shared by the fair lock's acquire and hand-over, and an election's campaign; prepended to
-- them (scripts/mod.rs).
--
-- live_head(queue, registrations, now, values): takes off the head of `queue` the waiters
-- whose registration (`registrations`: waiter id -> end, server ms) ended by `now`, and
-- returns the first waiter still registered, or false when none is left. `values` (optional:
-- an election's candidates' values, a hash by waiter id) loses their entries too, so that it
-- keeps only the queue's waiters.
local function live_head(queue, registrations, now, values)
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
    if values then
      redis.call('HDEL', values, head)
    end
  end
end
