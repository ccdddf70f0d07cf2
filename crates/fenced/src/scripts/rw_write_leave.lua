-- A read-write lock's writer whose wait is over (its deadline, an error, its future dropped)
-- leaves the waiting writers at once, and the readers it held back are told. Prepended to
-- abandon.lua, whose keys and arguments come first.
--
-- KEYS[3]  the waiting writers (zset: waiter id -> end of its registration, server ms)
-- ARGV[5]  this writer's waiter id
if redis.call('ZREM', KEYS[3], ARGV[5]) == 1 and ARGV[3] ~= '' then
  redis.call(PUBLISH, ARGV[2], ARGV[3])
end
