-- Shared by every script that hands out or reads fencing tokens; prepended to them when they are
-- built (scripts/mod.rs).
--
-- A fence is a stream whose entries are trimmed as they are added (XADD … MAXLEN 0): only its
-- last ID counts, which the server keeps with the emptied stream. `XADD fence MAXLEN 0 * f 1`
-- answers `ms-seq` with ms = max(server clock in ms, the last ID's ms), strictly above the last
-- ID: a counter that the server's own clock floors, with no Lua clock arithmetic and no side
-- channel.
--
-- A fence lost whole (deleted, evicted, past its retention, FLUSHALL, a restart without
-- persistence) starts one ms past the clock. `*` on a new stream answers `ms-0`, which a grant
-- earlier in that same ms (token ms * 1000 + seq, from the fence now lost) may equal or pass;
-- so the append that finds no fence appends `*` only to learn ms, then the ID `(ms + 1)-0`,
-- above every token handed out at or before ms by a fence started before ms. The first append
-- asks NOMKSTREAM, which tells a missing fence in the same command (EXISTS or TYPE would need
-- a permission of their own). Left open: a fence lost within the ms it started in, after a
-- grant, starts again at the same ID; nothing that forgot both can tell the two starts apart.
-- A fence put back older (a restart from an older snapshot, DEBUG LOADAOF, RESTORE, a failover
-- to a replica that missed the last grants) counts on from the clock, which passes every ID
-- handed out before once it passes the last one's ms, unless the clock stepped back further
-- than the retention covers (docs/guarantees.md).
--
-- A token is ms * 1000 + seq, written as the decimal ms followed by seq zero-padded to three
-- digits: strictly increasing with the ID for seq below 1000, below 2^53 until ms passes
-- FENCE_MAX_MS (the year 2255), so JSON and JavaScript carry it exactly. A sequence that
-- reaches 1000 (a thousand grants in one ms, or a fence ahead of a clock that stepped back) is
-- carried into the next ms by an explicit ID, `(ms + 1)-0`, which the server accepts because it
-- is above the last.
--
-- A fence that holds a decimal string is a fence of an earlier development build (the server
-- time in µs of its last grant): it is converted once, to the ID `(last div 1000 + 1)-0`,
-- whose token is above it. Anything else (another type, a string that is no such token, an ID
-- out of range) is not a fence this protocol can count on: the caller undoes its own writes and
-- answers that the key holds another type, naming it, and no token is handed out.

-- The largest ms whose tokens stay below 2^53: 9007199254739 * 1000 + 999 < 2^53.
local FENCE_MAX_MS = '9007199254739'

-- The token of a stream ID `ms-seq`, or nil when the ID is out of range.
local function fence_token(id)
  local dash = string.find(id, '-', 1, true)
  local ms, seq = string.sub(id, 1, dash - 1), string.sub(id, dash + 1)
  if #ms > #FENCE_MAX_MS or (#ms == #FENCE_MAX_MS and ms > FENCE_MAX_MS) or #seq > 3
      or ms == '0' then
    return nil
  end
  return ms .. string.sub('00' .. seq, -3)
end

-- Appends an ID (`*` for the server's next) to a fence: the ID; or, as a table, the error of
-- a key that is no stream (WRONGTYPE) or of an explicit ID not above the last. Any other error
-- (a permission, out of memory) fails the script: the same call again, unprotected, on a line
-- of its own, so that the client names the refused command from the line. `existing`: only to
-- a fence that exists (NOMKSTREAM), answering false, with nothing written, where there is none.
local function fence_add(key, id, existing)
  local added
  if existing then
    added = redis.pcall('XADD', key, 'NOMKSTREAM', 'MAXLEN', '0', id, 'f', '1')
  else
    added = redis.pcall('XADD', key, 'MAXLEN', '0', id, 'f', '1')
  end
  if type(added) ~= 'table' or string.find(added.err, 'WRONGTYPE', 1, true)
      or string.find(added.err, 'equal or smaller', 1, true) then
    return added
  end
  if existing then
    return redis.call('XADD', key, 'NOMKSTREAM', 'MAXLEN', '0', id, 'f', '1')
  end
  return redis.call('XADD', key, 'MAXLEN', '0', id, 'f', '1')
end

-- The ID just above token `token` (a decimal string) in ms: `(token div 1000 + 1)-0`.
local function fence_past(token)
  return string.format('%.0f-0', math.floor(tonumber(token) / 1000) + 1)
end

-- Appends the server's next ID to a fence, as fence_add(key, '*') does, except that a fence
-- that did not exist starts one ms past the clock (see above): `*` creates it at `ms-0`, and
-- the answer is the ID `(ms + 1)-0` appended after it. The same as fence_add(key, '*') for a
-- key of another type, and for an ID out of range (which the caller refuses).
local function fence_next(key)
  local added = fence_add(key, '*', true)
  if added ~= false then
    return added
  end
  added = fence_add(key, '*')
  local token = type(added) == 'string' and fence_token(added)
  if not token then
    return added
  end
  return fence_add(key, fence_past(token))
end

-- next_token(key, retention, proposed): appends one ID to the fence `key` (two where it starts
-- the fence: fence_next) and answers its token (a decimal string), after making the fence
-- outlive this grant by `retention` ms; or nil when `key` is not a fence (see above). A
-- proposal taken starts a missing fence at its own ID: Redlock's limit on masters that lose
-- their data covers it (backend/redlock.rs, invariant 3).
--
-- `proposed` (optional): a token Redlock's client proposes, so that the masters of a quorum
-- hand out the same one and need no write-back (backend/redlock.rs, invariant 3). It is
-- appended as its own ID, which the server refuses unless it is above the last; and it counts
-- only when at most 1 s ahead of this server's clock, so tokens stay within a second of the
-- server time of their grant: a client whose clock runs ahead cannot push them further, and a
-- fence lost whole still restarts above them once a second has passed.
local function next_token(key, retention, proposed)
  local id
  local p = proposed and tonumber(proposed)
  if p and p >= 1000 and p < 9007199254740000 and p == math.floor(p) then
    local t = redis.call('TIME')
    if p <= (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + 1000) * 1000 then
      id = fence_add(key, string.format('%.0f-%d', math.floor(p / 1000), p % 1000))
      if type(id) == 'table' then
        id = nil
      end
    end
  end
  id = id or fence_next(key)
  if type(id) == 'table' then
    local legacy = redis.call('MGET', key)[1]
    if not legacy or not string.match(legacy, '^[1-9]%d*$') or #legacy > 16
        or (#legacy == 16 and legacy > '9007199254738999') then
      return nil
    end
    redis.call('DEL', key)
    id = fence_add(key, fence_past(legacy))
  end
  local token = fence_token(id)
  if not token and string.match(id, '^%d+%-%d%d%d%d+$') then
    -- A sequence past 999: carried into the next ms.
    id = fence_add(key, fence_past(string.sub(id, 1, string.find(id, '-', 1, true) - 1) .. '000'))
    token = type(id) == 'string' and fence_token(id)
  end
  if not token then
    return nil
  end
  redis.call('PEXPIRE', key, retention)
  return token
end

-- fence_last(key): the token of the fence's last ID ('0' for a fence that does not exist), or
-- nil when `key` is not a fence. A fence of an earlier development build (a decimal string)
-- reads as its value.
local function fence_last(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'none' then
    return '0'
  end
  if kind == 'string' then
    local legacy = redis.call('GET', key)
    if string.match(legacy, '^[1-9]%d*$') and #legacy <= 16 then
      return legacy
    end
    return nil
  end
  if kind ~= 'stream' then
    return nil
  end
  local info = redis.call('XINFO', 'STREAM', key)
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then
      return fence_token(info[i + 1])
    end
  end
  return nil
end

-- raise_fence(key, token, retention): raises the fence `key` to at least `token` (Redlock's
-- write-back: backend/redlock.rs), as the ID of that token, which the server refuses when the
-- fence is already as high; answers false when `key` is not a fence (see above).
local function raise_fence(key, token, retention)
  local p = tonumber(token)
  local id = string.format('%.0f-%d', math.floor(p / 1000), p % 1000)
  if type(fence_add(key, id)) == 'table' and redis.call('TYPE', key)['ok'] ~= 'stream' then
    -- Not a stream: a fence of an earlier development build is converted first.
    if not next_token(key, retention) then
      return false
    end
    fence_add(key, id)
  end
  redis.call('PEXPIRE', key, retention)
  return true
end
