-- Shared by the multi-lock's release and abandon; prepended to them (scripts/mod.rs).
--
-- free_all(owner, message, first_key, first_channel): deletes every lock key KEYS[first_key..]
-- still holding `owner`, and publishes `message` on its channel (ARGV[first_channel..], in the
-- order of the keys). True if any was.
local function free_all(owner, message, first_key, first_channel)
  local freed = false
  for i = first_key, #KEYS do
    if redis.call('GET', KEYS[i]) == owner then
      redis.call('DEL', KEYS[i])
      redis.call(PUBLISH, ARGV[first_channel + i - first_key], message)
      freed = true
    end
  end
  return freed
end
