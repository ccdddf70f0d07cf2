-- Hand out a fencing token for a lease this owner already holds: the second step of a grant by
-- transaction (backend/grant.rs), run only when the transaction's INCR found no fence to count
-- on. A new name, a fence that expired after its retention, one lost with a restart or a
-- failover to a replica that missed it (INCR then starts again from 1), or one of another type
-- or not a number (INCR fails). The token is then the server clock's, as acquire.lua's is
-- (next_token in fence.lua), so it exceeds every token handed out before.
--
-- KEYS[1]  lock key   (string: owner token, PX = lease)
-- KEYS[2]  fence key  (string: the last fencing token handed out; see fence.lua)
-- ARGV[1]  owner token
-- ARGV[2]  the fence's retention, in ms (as acquire.lua's ARGV[3])
--
-- Returns token     the fencing token, a decimal string, as acquire.lua answers a grant,
--         {0, -2}   the lease is no longer this owner's (it ran out in between): not granted.
local seen = redis.call('MGET', KEYS[1], KEYS[2])
if seen[1] ~= ARGV[1] then
  return {0, -2}
end
local token = next_token(seen[2], redis.call('TIME'))
store_fence(KEYS[2], token, seen[2], ARGV[2])
return token
