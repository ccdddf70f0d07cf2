-- Raise a fence to at least a token, where the lease is still held: the write-back step of
-- Redlock's quorum fencing. The token a Redlock acquisition hands out is the largest of its
-- quorum's tokens; raised on a majority of masters that still hold the lease before it is
-- used, it makes every later grant on any majority larger still: the two majorities share a
-- master, whose later grant comes after this raise (its lock key had to be freed first), so
-- its next token is above it.
--
-- With no token (an empty ARGV[2]), the fence's next token instead, where the lease is still
-- held: the token of a lease granted by transaction whose fence was missing
-- (backend/node/grant.rs, invariant 2). next_token starts a fence still missing one ms past the
-- clock, and appends the server's next ID to one that another grant sharing it started
-- meanwhile. The lease held from its grant through this append, so no later grant came
-- between the lease and its token.
--
-- KEYS[1]  the lease: a lock (string: the owner token of the holder); with ARGV[4] 'permits',
--          a semaphore's holders (zset: owner -> end of its lease, server ms), where the
--          lease is held until its end by the server's clock
-- KEYS[2]  the fence (stream: the last fencing token handed out; see fence.lua)
-- ARGV[1]  the owner token of the lease
-- ARGV[2]  the token to raise the fence to; empty: append the fence's next token
-- ARGV[3]  the fence's retention, in ms
-- ARGV[4]  'permits' for a semaphore's lease; absent for a lock
--
-- Returns 1      raised (or already as high), and the lease is held here
--         token  for an empty ARGV[2], the lease held here: the next token (a decimal string)
--         0      the lease is not held here, or the fence key is not a fence (see fence.lua):
--                nothing changed, but for an ID an empty ARGV[2] appended past the tokens'
--                range
--
local held
if ARGV[4] == 'permits' then
  local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
  local t = redis.call('TIME')
  held = ends and tonumber(ends) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  held = redis.call('MGET', KEYS[1])[1] == ARGV[1]
end
if not held then
  return 0
end
if ARGV[2] == '' then
  return next_token(KEYS[2], ARGV[3]) or 0
end
if not raise_fence(KEYS[2], ARGV[2], ARGV[3]) then
  return 0
end
return 1
