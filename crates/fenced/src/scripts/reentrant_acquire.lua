-- Take a reentrant lock, or enter it once more as its owner.
--
-- The lock key is the plain string an exclusive lock uses (so a Lock and a ReentrantLock on
-- one name exclude each other); the holds live in a hash next to it. Each hold has its own
-- random id, so giving one back twice (a retry after a lost reply) is recognised.
--
-- KEYS[1]  lock key        (string: owner token, PX = lease)
-- KEYS[2]  holds key       (hash: token = the fencing token of the whole hold, h:<id> = 1 per hold)
-- KEYS[3]  fence key       (stream: the last token handed out; see fence.lua)
-- KEYS[4]  this attempt's tombstone, <lock>:void:<owner>:<hold id> (exists only if abandoned)
-- ARGV[1]  owner token
-- ARGV[2]  lease in ms
-- ARGV[3]  the fence's retention, in ms (what it outlives the last grant by)
-- ARGV[4]  this hold's id
-- ARGV[5]  '1': re-enter only (never take a free lock), '0': take it or re-enter
--
-- Returns {1, token} granted: a first hold (new token) or a re-entry (the hold's token),
--         {0, pttl}  held by somebody else (pttl = -1 for a key without expiry),
--         {0, -3}    the client already abandoned this attempt,
--         {0, -4}    re-enter only, and the owner does not hold the lock (lost or released),
--         {0, -5, 1} the lock key holds another type than a string (another program wrote
--                    it),
--         {0, -5, 3} the fence key is not a fence (fence.lua): nothing changed.
if redis.call('DEL', KEYS[4]) == 1 then
  return {0, -3}
end
local ttl = tonumber(ARGV[2])
-- MGET, not GET: false for a key of another type, whose SET NX below then fails (so a grant
-- costs nothing more to tell one).
local holder = redis.call('MGET', KEYS[1])[1]
if holder == ARGV[1] then
  local token = redis.call('HGET', KEYS[2], 'token')
  if not token then
    return {0, -4}
  end
  redis.call('HSET', KEYS[2], 'h:' .. ARGV[4], 1)
  -- A re-entry asks for at least its ttl, and never shortens what other holds were promised.
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl >= 0 and pttl < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
    pttl = ttl
  end
  if pttl >= 0 then
    redis.call('PEXPIRE', KEYS[2], pttl)
  end
  return {1, token}
end
if ARGV[5] == '1' then
  if not holder and redis.call('PTTL', KEYS[1]) ~= -2 then
    return {0, -5, 1}
  end
  return {0, -4}
end
if holder then
  return {0, redis.call('PTTL', KEYS[1])}
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ttl) then
  return {0, -5, 1}
end
local token = next_token(KEYS[3], ARGV[3])
if not token then
  redis.call('DEL', KEYS[1])
  return {0, -5, 3}
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'token', token, 'h:' .. ARGV[4], 1)
redis.call('PEXPIRE', KEYS[2], ttl)
return {1, token}
