-- Shared by the fair lock's acquire and an election's campaign; prepended to them
-- (scripts/mod.rs): the whole acquire of fair_acquire.lua, whose header names the keys `K`
-- and arguments `A` and the replies. `next_token` (fence.lua) and `live_head`
-- (fair_queue.lua) are prepended before it. `K[7]`, given by an election's campaign only, is
-- its candidates' values (election_campaign.lua): the waiters that leave the queue for an
-- ended registration leave it too.
local function fair_take(K, A)
  if redis.call('DEL', K[5]) == 1 then
    return {0, -3}
  end
  -- Handed to this waiter already: it left the queue, and must not join it again.
  if A[6] ~= '' then
    -- MGET: false for a key of another type, which the refusal below names.
    local holder = redis.call('MGET', K[1])[1]
    if holder and string.sub(holder, 1, #A[6]) == A[6] then
      return {0, -1}
    end
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  -- Waiters whose registration ended leave from the head (`live_head`: fair_queue.lua).
  local head = live_head(K[2], K[3], now, K[7])
  local pttl = redis.call('PTTL', K[1])
  if pttl == -2 and (not head or head == A[4]) then
    local token = next_token(K[4], A[3])
    if not token then
      return {0, -5, 4}
    end
    if head then
      redis.call('LPOP', K[2])
      redis.call('HDEL', K[3], A[4])
    end
    redis.call('SET', K[1], A[1], 'PX', A[2])
    return {1, token}
  end
  -- The key exists: MGET answers nil for another type only.
  if pttl ~= -2 and not redis.call('MGET', K[1])[1] then
    return {0, -5, 1}
  end
  local registration = tonumber(A[5])
  if registration > 0 then
    if redis.call('HSET', K[3], A[4], now + registration) == 1 then
      redis.call('RPUSH', K[2], A[4])
    end
    redis.call('PEXPIRE', K[2], registration * 2)
    redis.call('PEXPIRE', K[3], registration * 2)
  end
  if pttl == -2 then
    return {0, -1}
  end
  return {0, pttl}
end
