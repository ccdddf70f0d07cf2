-- Prepended instead of publish.lua on a Redis Cluster with sharded pub/sub (Redis 7+):
-- SPUBLISH, delivered by the node of the channel's slot alone. Every channel carries its
-- primitive's {hash tag}, so it lives in the slot of the script's keys.
local PUBLISH = 'SPUBLISH'
