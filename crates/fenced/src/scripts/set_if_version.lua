-- Write a versioned value only if its version is still the one the caller read.
--
-- KEYS[1]  the key (a hash: v = version, d = data)
-- ARGV[1]  the expected version (0: the key must not exist)
-- ARGV[2]  the new data
--
-- Returns {1, new version} when written, {0, current version} when it had moved on.
local version = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if version ~= tonumber(ARGV[1]) then
  return {0, version}
end
redis.call('HSET', KEYS[1], 'v', version + 1, 'd', ARGV[2])
return {1, version + 1}
