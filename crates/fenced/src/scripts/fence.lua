-- Shared by every script that hands out fencing tokens; prepended to them when they are built
-- (scripts/mod.rs).
--
-- A fence key is a string: the last fencing token handed out for a name (a decimal), with PX =
-- how long it outlives the last grant. Scripts read it with MGET, never GET: MGET answers nil
-- for a key of another type (an older layout, another program) instead of failing the script
-- half-way, after its lock was already set.
--
-- next_token(last, t): the token of a new grant, max(last + 1, server time in µs), as a Lua
-- number; `last` is the fence as read (or false), `t` the reply of TIME. Numbers stay exact:
-- tokens are below 2^53 (server µs reach it in the year 2255), Redis turns a number argument
-- into its exact decimal ("%.17g") and a number reply into an integer. No string.format: it
-- cost more than the rest of the arithmetic together. While the fence exists the counter alone
-- keeps tokens increasing; once it has expired (no grant for the retention period), or was
-- lost with a restart or a failover to a replica that missed the last writes, the server clock
-- keeps the next token above every earlier one, since each earlier token was at most the
-- server time of its grant (grants of one name are rarer than one per µs), unless the clock
-- stepped back. So the TIME call stays, on every grant.
--
-- `proposed` (optional): a token Redlock's client proposes, so that the masters of a quorum
-- hand out the same one and need no write-back (backend/redlock.rs, invariant 3). It counts
-- only when larger and at most 1 s ahead of this server's clock, so tokens stay within a
-- second of the server time of their grant: a client whose clock runs ahead cannot push them
-- further, and the restart rule above still holds once a second has passed.
local function next_token(last, t, proposed)
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local token = math.max((tonumber(last or '0') or 0) + 1, now_us)
  local p = tonumber(proposed or '0') or 0
  if p > token and p <= now_us + 1000000 then
    token = p
  end
  return token
end
