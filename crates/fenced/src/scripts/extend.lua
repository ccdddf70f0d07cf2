-- Renew or re-time a lease: compare-and-pexpire, in epoch order. Never re-creates a key.
--
-- Each `extend` to a new ttl opens a new epoch on the client; renewals carry the epoch whose
-- ttl they ask for. Requests can reach Redis out of order (one timed out on a dead connection
-- and ran later than a newer one sent on a fresh connection), so a request of an OLDER epoch
-- than the newest applied one is refused: the ttl that Redis applies last is always the one
-- the client asked for last. Requests of one epoch ask for the same ttl, so their order does
-- not matter. Epoch 0 (the acquire's ttl) writes no epoch key: a lease that is never
-- extended reads one missing key, in the same MGET as the lock.
--
-- A take-over from a ticket (ARGV[4] = '1') opens the epoch after the ticket's, and is refused
-- when that epoch was applied already, so a ticket is taken over once; except by a repeat of
-- the very take-over that applied it. Each take-over leaves its mark in KEYS[3], and a repeat
-- (after a lost reply, or a shortfall of replicas) proves itself with the marks its earlier
-- attempts may have left (core/takeover.rs).
--
-- KEYS[1]  lock key
-- KEYS[2]  this owner's epoch key: <lock>:epoch:<owner>
-- KEYS[3]  take-overs only: <lock>:taken:<owner>, the nonce of the take-over that applied
--          the newest epoch; expires with the lease
-- ARGV[1]  owner token
-- ARGV[2]  new lease in ms, counted from now
-- ARGV[3]  the request's epoch (0, 1, 2, ...)
-- ARGV[4]  optional: '1' to take the lease over from a ticket
-- ARGV[5]  with ARGV[4]: the mark this take-over leaves
-- ARGV[6..] with ARGV[4]: the marks its earlier attempts may have left (none for a first)
--
-- Returns 1 applied,
--         0 not held by this owner (nothing changed),
--         2 superseded: a newer epoch was applied before, or this epoch's take-over was
--           another's; nothing changed.
local take_over = ARGV[4] == '1'
local seen
if take_over then
  seen = redis.call('MGET', KEYS[1], KEYS[2], KEYS[3])
else
  seen = redis.call('MGET', KEYS[1], KEYS[2])
end
if seen[1] ~= ARGV[1] then
  return 0
end
local epoch = tonumber(ARGV[3])
local newest = tonumber(seen[2] or '0') or 0
if epoch < newest then
  return 2
end
if take_over and epoch == newest then
  local repeated = false
  for i = 6, #ARGV do
    if seen[3] == ARGV[i] then
      repeated = true
    end
  end
  if not repeated then
    return 2
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if epoch > 0 then
  -- Lives exactly as long as the lease it orders.
  redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
end
if take_over then
  redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[2])
end
return 1
