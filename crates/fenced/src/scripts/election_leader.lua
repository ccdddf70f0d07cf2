-- Read an election's leader, atomically (read-only); and, when asked, its candidates.
--
-- KEYS[1]  leader key (string: the leader's owner token, PX = its lease)
-- KEYS[2]  the leader record (hash: owner, value, term, since, v)
-- KEYS[3]  queue of candidates (list of waiter ids)
-- KEYS[4]  the changes of leader (string: how many grants followed the election's first)
-- KEYS[5]  the candidates' values (hash: waiter id -> '<queued since, server ms> <value>')
-- ARGV[1]  '1': list the candidates too; absent (or anything else): count them only
--
-- Returns {0, candidates} no leader (the key is gone, or held by an owner without a record:
--         a grant in progress is never seen half-way, scripts being atomic),
--         {1, candidates, value, term, since (server ms), lease left (ms), proclaims,
--         changes of leader};
--         listing, either ends with the server's clock (ms) and the queue, oldest first: each
--         candidate's '<queued since> <value>', or nil for one whose campaign recorded none.
-- `candidates` counts the queue, waiters whose registration ended included; the list too.
local candidates = redis.call('LLEN', KEYS[3])
local owner = redis.call('MGET', KEYS[1])[1]
local r = redis.call('HMGET', KEYS[2], 'owner', 'value', 'term', 'since', 'v')
local left = redis.call('PTTL', KEYS[1])
local changes = tonumber(redis.call('MGET', KEYS[4])[1]) or 0
local reply = {0, candidates}
if owner and r[1] == owner then
  -- false, not nil, for a field that is no number: a nil would cut the reply short there.
  reply = {1, candidates, r[2], r[3], tonumber(r[4]) or false, left, tonumber(r[5]) or false,
    changes}
end
if ARGV[1] == '1' then
  local t = redis.call('TIME')
  reply[#reply + 1] = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local queue = {}
  for i, waiter in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
    queue[i] = redis.call('HGET', KEYS[5], waiter)
  end
  reply[#reply + 1] = queue
end
return reply
