-- Tells a held lease from a key of another type, after a refusal that read neither: an
-- unfenced lease's native `SET NX PX` answers nil for both (unfenced_acquire.lua). Sent once,
-- after the first refusal of an acquire. Read atomically, with the lock's own commands only.
--
-- KEYS[1]  lock key (string: owner token, PX = lease)
--
-- Returns 1 when the key exists and holds another type than a string (another program wrote
--           it): MGET answers nil for another type only,
--         0 otherwise (held by a lease, or free since).
if redis.call('PTTL', KEYS[1]) == -2 then
  return 0
end
if redis.call('MGET', KEYS[1])[1] then
  return 0
end
return 1
