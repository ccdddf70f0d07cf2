-- Campaign in an election: take its leader key as a fair lock's head does (fair_take.lua,
-- FIFO among candidates of every process), and on a grant record the new leader, count the
-- change of leader and announce the new term to observers. A candidate that queues records
-- its value and since when it queued, for the status to list.
--
-- KEYS[1]  leader key (string: the leader's owner token, PX = its lease)
-- KEYS[2]  queue of candidates (list of waiter ids, oldest first)
-- KEYS[3]  registrations (hash: waiter id -> end of its registration, server ms)
-- KEYS[4]  fence key (stream: the last term handed out; see fence.lua)
-- KEYS[5]  this attempt's tombstone
-- KEYS[6]  the leader record (hash: owner, value, term, since (server ms), v (proclaims))
-- KEYS[7]  the candidates' values (hash: waiter id -> '<queued since, server ms> <value>'),
--          for the waiters of KEYS[2] only: an entry leaves with its waiter
-- KEYS[8]  the changes of leader (string: how many grants followed the election's first)
-- ARGV[1..6] as fair_acquire.lua's (ARGV[6], the hand-over half, is '' for a candidate)
-- ARGV[7]  the value the candidate advertises once elected
-- ARGV[8]  the observers' channel
-- ARGV[9]  the announcement: '<client id> 1'
--
-- Returns as fair_acquire.lua: {1, term} elected, {0, ms} wait, {0, -3} abandoned already,
--         {0, -5, 1} the leader key holds another type, {0, -5, 4} the fence key is not a
--         fence.
-- A fence already there: this election granted a term before, within the fence's retention.
local granted_before = redis.call('EXISTS', KEYS[4])
local reply = fair_take(KEYS, ARGV)
if reply[1] == 1 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('DEL', KEYS[6])
  redis.call('HSET', KEYS[6], 'owner', ARGV[1], 'value', ARGV[7], 'term', reply[2],
    'since', now, 'v', 0)
  -- It lives as long as the lease and a second more (election_extend.lua renews both); it
  -- counts only while its owner holds the leader key.
  redis.call('PEXPIRE', KEYS[6], tonumber(ARGV[2]) + 1000)
  redis.call('HDEL', KEYS[7], ARGV[4])
  -- Each grant after the first is a change of leader. The count is kept as long as the
  -- fence (ARGV[3]), which every grant renews: it outlives the record and the leases. MGET
  -- reads a key of another type (another program's) as none, and SET replaces it.
  local changes = tonumber(redis.call('MGET', KEYS[8])[1])
  changes = changes and changes + 1 or granted_before
  redis.call('SET', KEYS[8], string.format('%.0f', changes), 'PX', ARGV[3])
  redis.call(PUBLISH, ARGV[8], ARGV[9])
elseif reply[2] >= -1 and tonumber(ARGV[5]) > 0 then
  -- Queued (fair_take registered it): since when and with what value, set once per place in
  -- the queue, and kept as long as the registrations.
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSETNX', KEYS[7], ARGV[4], string.format('%.0f', now) .. ' ' .. ARGV[7])
  redis.call('PEXPIRE', KEYS[7], tonumber(ARGV[5]) * 2)
end
return reply
