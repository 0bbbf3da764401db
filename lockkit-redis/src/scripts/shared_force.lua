-- Admin: release a read-write lock or semaphore whoever holds it, and wake waiters.
-- KEYS[1] write hash, KEYS[2] holders zset; ARGV[1] channel
-- Returns 1 when anything was held, 0 when free.
local n = redis.call('del', KEYS[1], KEYS[2])
if n > 0 then
  redis.call('publish', ARGV[1], '0')
  return 1
end
return 0
