-- Prepended (after typed.lua) to the scripts that remove one of our own hash fields.
-- HDEL of `field` in `key`: 1 when removed, 0 when absent or when the key holds another type
-- (then it is not ours). Any other error comes back as the second result (see typed_call).
local function hdel_ours(key, field)
  local ok, r = typed_call('hdel', key, field)
  if not ok then
    if r then
      return nil, r
    end
    return 0
  end
  return r
end
