-- Renew one hold of a reentrant lock. Never shortens the lease: every hold of the owner
-- renews the same key, each with its own ttl, and each may count only on what it asked for.
--
-- KEYS[1]  lock key
-- KEYS[2]  holds key
-- ARGV[1]  owner token
-- ARGV[2]  lease in ms, counted from now
-- ARGV[3]  this hold's id
--
-- Returns 1 the lease lasts at least ARGV[2] ms from now,
--         0 not held by this owner, or this hold was given back (nothing changed).
local gone = redis.call('GET', KEYS[1]) ~= ARGV[1]
if not gone then
  gone = redis.call('HEXISTS', KEYS[2], 'h:' .. ARGV[3]) == 0
end
if gone then
  return 0
end
local ttl = tonumber(ARGV[2])
local pttl = redis.call('PTTL', KEYS[1])
if pttl >= 0 and pttl < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return 1
