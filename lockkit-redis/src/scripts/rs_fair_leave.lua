-- A fair waiter in Redisson's RFairLock queue (redisson_compat) gives up (timeout, cancellation):
-- as Redisson's does, the waiters behind it move up by its wait, and it leaves the queue; if the
-- lock is free, the new first waiter is woken, and one waiter of each client.
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] deadlines
-- ARGV[1] owner, ARGV[2] lock channel, ARGV[3] its wait (heartbeat timeout) ms, ARGV[4] now ms
local queue = redis.call('lrange', KEYS[2], 0, -1)
local behind = false
for _, w in ipairs(queue) do
  if behind then
    redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), w)
  elseif w == ARGV[1] then
    behind = true
  end
end
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('lrem', KEYS[2], 0, ARGV[1])
drop_stale(KEYS[2], KEYS[3], tonumber(ARGV[4]))
if redis.call('exists', KEYS[1]) == 0 then
  -- The release may have woken only us: wake the next fair waiter, and the others.
  wake_next(KEYS[2], ARGV[2], false)
end
return 1
