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
-- KEYS[1]  lock key
-- KEYS[2]  this owner's epoch key: <lock>:epoch:<owner>
-- ARGV[1]  owner token
-- ARGV[2]  new lease in ms, counted from now
-- ARGV[3]  the request's epoch (0, 1, 2, ...)
-- ARGV[4]  optional: '1' to take the lease over from a ticket, which refuses the epoch the
--          newest applied one has too, so a ticket is taken over once (ticket.rs)
--
-- Returns 1 applied,
--         0 not held by this owner (nothing changed),
--         2 superseded: a newer epoch was applied before; nothing changed.
local seen = redis.call('MGET', KEYS[1], KEYS[2])
if seen[1] ~= ARGV[1] then
  return 0
end
local epoch = tonumber(ARGV[3])
local newest = tonumber(seen[2] or '0') or 0
if epoch < newest or (ARGV[4] == '1' and epoch <= newest) then
  return 2
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if epoch > 0 then
  -- Lives exactly as long as the lease it orders.
  redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
end
return 1
