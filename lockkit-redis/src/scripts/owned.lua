-- Prepended to the scripts that remove one of our own hash fields.
-- HDEL of `field` in `key`: 1 when removed, 0 when absent or when the key holds another type
-- (then it is not ours). Any other error (READONLY on a just-demoted primary, NOPERM, OOM) is
-- raised as it came, so the client sees it and tries again instead of reading "not ours".
local function hdel_ours(key, field)
  local r = redis.pcall('hdel', key, field)
  if type(r) == 'table' and r.err then
    if string.find(r.err, '^WRONGTYPE') then
      return 0
    end
    error(r)
  end
  return r
end
