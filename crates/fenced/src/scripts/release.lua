-- Give a lease back: compare-and-delete, then wake the waiters.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner token
-- ARGV[2]  channel to publish the release on
-- ARGV[3]  message: '<client id> <wake>', so that client can skip its own echo; empty: no
--          announcement (the waiters hear the key's own `del` keyspace event)
--
-- Returns 1 released now,
--         0 not held by this owner (expired, broken, held by somebody else, or released
--           already by an earlier attempt of this same release): nothing changed.
--
-- No record of the release is kept: a retry whose first reply was lost tells "my first
-- attempt worked" from "my lease was gone" on the client, by the lease's validity deadline
-- (core/cleanup.rs, invariant 2). Redis writes nothing but the DEL.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[3] ~= '' then
    redis.call(PUBLISH, ARGV[2], ARGV[3])
  end
  return 1
end
return 0
