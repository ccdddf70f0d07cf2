-- Give up an acquire attempt whose outcome the client never learned (it timed out, or its
-- future was dropped mid-flight).
--
-- The attempt may have run already, or may still be on its way: after a timeout the client
-- reconnects, so the attempt can sit in a dead connection's buffer on a paused server and
-- run AFTER this script, which arrives on the new connection. So: delete the lease if the
-- attempt took it; otherwise leave a tombstone that makes the late attempt refuse itself
-- (acquire.lua checks it first). The tombstone expires by itself, so attempts that never
-- arrive leave nothing behind.
--
-- KEYS[1]  lock key
-- KEYS[2]  the attempt's tombstone: <lock>:void:<owner>
-- ARGV[1]  owner token of the abandoned attempt
-- ARGV[2]  channel to publish a release on
-- ARGV[3]  message: '<client id> <wake>'; empty: no announcement (the waiters hear the key's
--          own `del` keyspace event), as in release.lua
-- ARGV[4]  how long the tombstone lives, in ms
--
-- Returns 1 the attempt had taken the lease, which is now released,
--         0 it had not: a tombstone now voids it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[3] ~= '' then
    redis.call(PUBLISH, ARGV[2], ARGV[3])
  end
  return 1
end
redis.call('SET', KEYS[2], 1, 'PX', ARGV[4])
return 0
