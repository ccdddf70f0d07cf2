-- Read an election's leader, atomically (read-only).
--
-- KEYS[1]  leader key (string: the leader's owner token, PX = its lease)
-- KEYS[2]  the leader record (hash: owner, value, term, since, v)
-- KEYS[3]  queue of candidates (list of waiter ids)
--
-- Returns {0, candidates} no leader (the key is gone, or held by an owner without a record:
--         a grant in progress is never seen half-way, scripts being atomic),
--         {1, candidates, value, term, since (server ms), lease left (ms), proclaims}.
-- `candidates` counts the queue, waiters whose registration ended included.
local candidates = redis.call('LLEN', KEYS[3])
local owner = redis.call('MGET', KEYS[1])[1]
if not owner then
  return {0, candidates}
end
local r = redis.call('HMGET', KEYS[2], 'owner', 'value', 'term', 'since', 'v')
if r[1] ~= owner then
  return {0, candidates}
end
return {1, candidates, r[2], r[3], tonumber(r[4]), redis.call('PTTL', KEYS[1]), tonumber(r[5])}
