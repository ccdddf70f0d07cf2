-- Hand out a fencing token for a lease this owner already holds: the second step of a grant by
-- transaction (backend/node/grant.rs), run only when the transaction's count cannot be trusted:
-- INCR found no fence (a new name, a fence past its retention, one lost with a restart without
-- persistence: INCR starts again from 1), a fence of another type or not a number (INCR
-- fails), or a fence that has not counted under this server's replication ID (it may have been
-- restored older than it was: a restart from a snapshot, a failover to a replica that missed
-- the last grants). The token is then the server clock's, as acquire.lua's is (next_token in
-- fence.lua), so it exceeds every token handed out before; and the fence counts under this
-- replication ID from now on.
--
-- KEYS[1]  lock key    (string: owner token, PX = lease)
-- KEYS[2]  fence key   (string: the last fencing token handed out; see fence.lua)
-- KEYS[3]  replid key  (string: the replication ID under which the fence counts)
-- ARGV[1]  owner token
-- ARGV[2]  the fence's retention, in ms (as acquire.lua's ARGV[3])
-- ARGV[3]  this server's replication ID (master_replid) as the transaction read it, or empty
--          when it was unknown (the replid key is then left as it is, and counts for nothing)
--
-- Returns token     the fencing token, a decimal string, as acquire.lua answers a grant,
--         {0, -2}   the lease is no longer this owner's (it ran out in between): not granted.
local seen = redis.call('MGET', KEYS[1], KEYS[2])
if seen[1] ~= ARGV[1] then
  return {0, -2}
end
local token = next_token(seen[2], redis.call('TIME'))
store_fence(KEYS[2], token, seen[2], ARGV[2])
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
end
return token
