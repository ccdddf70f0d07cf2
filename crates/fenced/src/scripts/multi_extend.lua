-- Renew or re-time every lock of a multi-lock, in epoch order (see extend.lua). All or
-- nothing: if any one of them is no longer this owner's, nothing changes and the lease of
-- the whole multi-lock is over.
--
-- KEYS[1]    the owner's epoch key, on the first name
-- KEYS[2..]  the lock keys
-- ARGV[1]  owner token
-- ARGV[2]  new lease in ms
-- ARGV[3]  the request's epoch
--
-- Returns 1 applied, 0 not held (one of the locks was lost), 2 superseded.
for i = 2, #KEYS do
  if redis.call('GET', KEYS[i]) ~= ARGV[1] then
    return 0
  end
end
local epoch = tonumber(ARGV[3])
if epoch < (tonumber(redis.call('GET', KEYS[1]) or '0') or 0) then
  return 2
end
for i = 2, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
if epoch > 0 then
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
end
return 1
