-- Prepended to every script that runs a command on a key that may hold another type.

-- redis.pcall(...) that tells a key of another type from a failure. Returns true and the reply;
-- false and nil on WRONGTYPE (the key is foreign: not ours, not a lock); false and the error
-- reply on any other error (READONLY on a just-demoted primary, NOPERM, OOM), for the script to
-- return as its reply, so the client sees it and tries again instead of reading "not ours" (a
-- returned error table is the reply on every Redis version; one raised with error() is not).
local function typed_call(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    if string.find(r.err, '^WRONGTYPE') then
      return false, nil
    end
    return false, r
  end
  return true, r
end
