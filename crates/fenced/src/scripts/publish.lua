-- Prepended to every script that announces a release (scripts/mod.rs): the command that
-- announces it. Classic PUBLISH, which every node of a cluster relays to every other node.
local PUBLISH = 'PUBLISH'
