-- Shared by the multi-lock's release and abandon; prepended to them (scripts/mod.rs).
--
-- free_all(owner, message): deletes every lock key KEYS[2..] still holding `owner`, and
-- publishes `message` on its channel (ARGV[4..], in the order of the keys). True if any was.
local function free_all(owner, message)
  local freed = false
  for i = 2, #KEYS do
    if redis.call('GET', KEYS[i]) == owner then
      redis.call('DEL', KEYS[i])
      redis.call('PUBLISH', ARGV[i + 2], message)
      freed = true
    end
  end
  return freed
end
