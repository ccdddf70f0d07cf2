-- Renew a lease: compare-and-pexpire. Never re-creates a key that is gone.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner token
-- ARGV[2]  new lease in ms, counted from now
--
-- Returns 1 extended, 0 not held by this owner (nothing changed).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
