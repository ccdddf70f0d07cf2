-- Give a fair lock back: compare-and-delete, then wake ONLY the head of the queue (on its
-- own channel).
--
-- KEYS[1]  lock key
-- KEYS[2]  queue (list of waiter ids)
-- ARGV[1]  owner token
-- ARGV[2]  the waiters' channel prefix: the head is woken on <prefix><waiter id>
--
-- Returns 1 released now, 0 not held (see release.lua: no record is kept for retries).
-- `free_fair` comes from fair_free.lua, prepended when the script is built.
if free_fair(KEYS[1], KEYS[2], ARGV[1], ARGV[2]) then
  return 1
end
return 0
