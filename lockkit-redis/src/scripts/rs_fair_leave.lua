-- A fair waiter in Redisson's layout (redisson_compat) gives up (timeout, cancellation): leave
-- the queue and, if the lock is free, wake the new first waiter.
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] heartbeats; ARGV[1] owner, ARGV[2] channel
redis.call('lrem', KEYS[2], 0, ARGV[1])
redis.call('hdel', KEYS[3], ARGV[1])
if redis.call('exists', KEYS[1]) == 0 then
  local first = redis.call('lindex', KEYS[2], 0)
  if first then
    redis.call('publish', ARGV[2], first)
  end
end
return 1
