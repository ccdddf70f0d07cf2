-- Take a lease and hand out a fencing token, in one step.
--
-- KEYS[1]  lock key         (string: owner token, PX = lease)
-- KEYS[2]  fence key        (stream: its last ID is the last token handed out; see fence.lua)
-- KEYS[3]  this attempt's tombstone, <lock>:void:<owner> (exists only if abandoned)
-- ARGV[1]  owner token      (128 random bits, hex)
-- ARGV[2]  lease in ms
-- ARGV[3]  the fence's retention, in ms (what it outlives the last grant by)
-- ARGV[4]  optional: the token Redlock proposes (see next_token in fence.lua)
--
-- Returns token     when granted: the fencing token, a decimal string (no table: the common
--                   reply is the cheapest one),
--         {0, pttl}  when somebody holds the lock (pttl = -1 for a key without expiry),
--         {0, -3}    when the client already abandoned this attempt (see abandon.lua),
--         {0, -5, 1} when the lock key holds another type than a string (another program
--                    wrote it): no release will ever free it,
--         {0, -5, 2} when the fence key is not a fence (fence.lua): nothing changed.
--
-- Four commands when granted, three when busy (the MGET that tells a held lock from a key of
-- another type costs only a refusal: the key exists, so MGET answers nil for another type
-- only; no command beyond the lock's own): the tombstone is read only once the lock is taken,
-- since a refused attempt changes nothing whether or not it was abandoned (its tombstone then
-- expires unused).
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if not redis.call('MGET', KEYS[1])[1] then
    return {0, -5, 1}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
if redis.call('DEL', KEYS[3]) == 1 then
  -- Abandoned before it arrived: nobody can have seen the lock yet, so simply undo it.
  redis.call('DEL', KEYS[1])
  return {0, -3}
end
local token = next_token(KEYS[2], ARGV[3], ARGV[4])
if not token then
  redis.call('DEL', KEYS[1])
  return {0, -5, 2}
end
return token
