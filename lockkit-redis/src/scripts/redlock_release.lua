-- Redlock: release the lock on this master if ARGV[1] holds it (as every Redlock client does).
-- KEYS[1] lock; ARGV[1] owner. Returns 1 when deleted, 0 when not ours (or absent).
if redis.pcall('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
