-- Permit release on Redisson's RSemaphore layout (redisson_compat): the lease leaves lockkit's
-- set and its permits go back into the count, announced as RSemaphore's release does (the new
-- count on its channel). Idempotent like the mutex release.
-- KEYS[1] free permits, KEYS[2] lockkit leases, KEYS[3] latch
-- ARGV[1] member '<owner>|<n>', ARGV[2] channel, ARGV[3] latch TTL ms
if redis.call('zrem', KEYS[2], ARGV[1]) == 1 then
  local free = redis.call('incrby', KEYS[1], tonumber(string.match(ARGV[1], '|(%d+)$') or '1'))
  redis.call('publish', ARGV[2], free)
  redis.call('set', KEYS[3], '1', 'px', ARGV[3])
  return 1
end
return redis.call('exists', KEYS[3])
