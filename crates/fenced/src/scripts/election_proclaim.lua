-- Change the value a leader advertises, keeping its term and its lease.
--
-- KEYS[1]  leader key (string: the leader's owner token)
-- KEYS[2]  the leader record (hash: owner, value, term, since, v)
-- ARGV[1]  owner token
-- ARGV[2]  the new value
-- ARGV[3]  the observers' channel
-- ARGV[4]  the announcement: '<client id> 1'
--
-- Returns the record's new proclaim count (>= 1) when applied, 0 when ARGV[1] is not the
--         leader (its lease ended, or it stepped down): nothing changed.
if redis.call('MGET', KEYS[1])[1] ~= ARGV[1] or redis.call('HGET', KEYS[2], 'owner') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[2], 'value', ARGV[2])
local v = redis.call('HINCRBY', KEYS[2], 'v', 1)
redis.call(PUBLISH, ARGV[3], ARGV[4])
return v
