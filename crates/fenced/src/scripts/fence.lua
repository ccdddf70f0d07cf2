-- Shared by every script that hands out fencing tokens; prepended to them when they are built
-- (scripts/mod.rs).
--
-- A fence key is a string: the last fencing token handed out for a name (a decimal), with an
-- expiry that outlives the last grant by the retention (see store_fence). Scripts read it with
-- MGET, never GET: MGET answers nil for a key of another type (an older layout, another
-- program) instead of failing the script half-way, after its lock was already set.
--
-- next_token(last, t, proposed): the token of a new grant, max(last + 1, server time in µs), as
-- a decimal string; `last` is the fence as read (a string, or false), `t` the reply of TIME.
-- While the fence exists the counter alone keeps tokens increasing; once it has expired (no
-- grant for the retention period), or was lost with a restart or a failover to a replica that
-- missed the last writes, the server clock keeps the next token above every earlier one, since
-- each earlier token was at most the server time of its grant (grants of one name are rarer
-- than one per µs), unless the clock stepped back. So the TIME call stays, on every grant.
--
-- Why strings: in the common case the clock is past the last token, and the token is the server
-- time itself, built from TIME's two strings and compared with the fence as text (two decimals
-- of the same length order as their numbers do: Lua compares with strcoll, and every collation
-- Redis may run under, C or a glibc locale, orders the digits 0-9 so). That costs no number
-- parsing and no number-to-text conversion for the SET, which together were a third of a
-- grant's script time (scripts/lua-costs). Only a fence at or past the clock (two grants in one
-- µs, a clock that stepped back, a Redlock proposal) takes the arithmetic; numbers stay exact
-- below 2^53 (server µs reach it in the year 2255).
--
-- `proposed` (optional): a token Redlock's client proposes, so that the masters of a quorum
-- hand out the same one and need no write-back (backend/redlock.rs, invariant 3). It counts
-- only when larger and at most 1 s ahead of this server's clock, so tokens stay within a second
-- of the server time of their grant: a client whose clock runs ahead cannot push them further,
-- and the restart rule above still holds once a second has passed.
local function next_token(last, t, proposed)
  local us = t[2]
  -- Seconds and zero-padded microseconds: 16 digits until the year 2286. (Nine times in ten
  -- the microseconds have six digits already; a call to a string function costs here.)
  local now
  if #us == 6 then
    now = t[1] .. us
  else
    now = t[1] .. string.sub('00000' .. us, #us)
  end
  local token = now
  if last and not (#last == #now and last < now) then
    local after = (tonumber(last) or 0) + 1
    if after > tonumber(now) then
      token = string.format('%.0f', after)
    end
  end
  if proposed then
    local p = tonumber(proposed)
    if p and p > tonumber(token) and p <= tonumber(now) + 1000000 then
      token = string.format('%.0f', p)
    end
  end
  return token
end

-- store_fence(key, token, last, retention): writes a grant's token over the fence read as
-- `last`, and makes the fence outlive the grant by at least `retention` - 1001 s (the client
-- adds that much, core/mod.rs). Setting the expiry (PX) is the dearest part of the write: Redis
-- parses it and rewrites the command as PXAT for its replicas. So PX is set only when the
-- token leaves the 1000 s window (its first 7 of 16 digits) of the fence it replaces, and the
-- write keeps the expiry (KEEPTTL) otherwise: about once per 1000 s of a busy name's grants.
--
-- Why that is enough: the last PX write, at server time s0 with token t0, set the expiry to
-- s0 + retention. Every later write kept it, so every later token shares t0's window, and so
-- does this one (t): t < t0 + 1000 s. A token is at most 1 s past the server time of its grant
-- (next_token), so s0 >= t0 - 1 s; and a token is at least its grant's server time, s <= t.
-- Hence s0 + retention > s - 1001 s + retention. (A Redlock fence raised to another master's
-- token, fence_raise.lua, may run ahead of this server's clock by the masters' skew too, which
-- that bound then loses; with a retention of hours, a skew of seconds does not matter.)
local function store_fence(key, token, last, retention)
  if type(last) == 'string' and #last == #token
      and string.sub(last, 1, 7) == string.sub(token, 1, 7) then
    redis.call('SET', key, token, 'KEEPTTL')
  else
    redis.call('SET', key, token, 'PX', retention)
  end
end
