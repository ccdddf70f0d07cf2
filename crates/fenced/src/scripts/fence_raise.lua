-- Raise a fence to at least a token, where the lease is still held: the write-back step of
-- Redlock's quorum fencing. The token a Redlock acquisition hands out is the largest of its
-- quorum's tokens; raised on a majority of masters that still hold the lease before it is
-- used, it makes every later grant on any majority larger still: the two majorities share a
-- master, whose later grant comes after this raise (its lock key had to be freed first), so
-- its next token is above it.
--
-- KEYS[1]  the lock (string: the owner token of the holder)
-- KEYS[2]  the fence (stream: the last fencing token handed out; see fence.lua)
-- ARGV[1]  the owner token of the lease
-- ARGV[2]  the token to raise the fence to
-- ARGV[3]  the fence's retention, in ms
--
-- Returns 1  raised (or already as high), and the lease is held here
--         0  the lease is not held here, or the fence key is not a fence: nothing changed
--
local held = redis.call('MGET', KEYS[1])[1]
if held ~= ARGV[1] then
  return 0
end
if not raise_fence(KEYS[2], ARGV[2], ARGV[3]) then
  return 0
end
return 1
