-- Shared by the fencing scripts; prepended to them when they are built (scripts/mod.rs).
--
-- older(a, b): true when token a is older than token b. Tokens are decimal strings without
-- leading zeros, compared by length first and then bytes: exact for every u64, where Lua's
-- doubles are exact only up to 2^53.
local function older(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
