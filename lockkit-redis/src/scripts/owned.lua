-- Prepended to the scripts that remove one of our own hash fields.
-- HDEL of `field` in `key`: 1 when removed, 0 when absent or when the key holds another type
-- (then it is not ours). Any other error (READONLY on a just-demoted primary, NOPERM, OOM) comes
-- back as the second result, for the script to return as its reply, so the client sees it and
-- tries again instead of reading "not ours" (a returned error table is the reply on every Redis
-- version; one raised with error() is not).
local function hdel_ours(key, field)
  local r = redis.pcall('hdel', key, field)
  if type(r) == 'table' and r.err then
    if string.find(r.err, '^WRONGTYPE') then
      return 0
    end
    return nil, r
  end
  return r
end
