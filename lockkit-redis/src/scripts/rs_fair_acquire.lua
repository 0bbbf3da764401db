-- Fair (FIFO) acquire in Redisson's layout (redisson_compat): take the lock only when it is free
-- and we are first in the queue; otherwise queue (once) and refresh our heartbeat.
-- KEYS[1] lock hash, KEYS[2] fencing counter, KEYS[3] queue (list of owners),
-- KEYS[4] heartbeats (hash owner -> deadline, server ms)
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] fencing counter TTL ms, ARGV[4] heartbeat timeout ms,
-- ARGV[5] channel
-- Returns {1, token} when acquired, {0, pttl of the holder or -2} when queued.
local held, wrong_type = lock_fields(KEYS[1])
if not held then
  return wrong_type
end
local t = redis.call('time')
local now = now_ms(t)
-- Waiters whose heartbeat stopped (their process died) leave the front of the queue. Live
-- waiters refresh theirs well within the timeout, however long the holder keeps the lock.
local first = redis.call('lindex', KEYS[3], 0)
while first and first ~= ARGV[1] and tonumber(redis.call('hget', KEYS[4], first) or '0') < now do
  redis.call('lpop', KEYS[3])
  redis.call('hdel', KEYS[4], first)
  first = redis.call('lindex', KEYS[3], 0)
end
if held == 0 and (not first or first == ARGV[1]) then
  if first then
    redis.call('lpop', KEYS[3])
    redis.call('hdel', KEYS[4], ARGV[1])
  end
  return take_hash(KEYS[1], ARGV[1], ARGV[2], KEYS[2], ARGV[3], t)
end
if redis.call('hexists', KEYS[4], ARGV[1]) == 0 then
  redis.call('rpush', KEYS[3], ARGV[1])
end
redis.call('hset', KEYS[4], ARGV[1], now + tonumber(ARGV[4]))
-- The queue keys expire when no waiter refreshes them.
redis.call('pexpire', KEYS[3], tonumber(ARGV[4]) * 2)
redis.call('pexpire', KEYS[4], tonumber(ARGV[4]) * 2)
if held == 0 then
  -- Free, but someone else is first: make sure they know.
  redis.call('publish', ARGV[5], first)
  return {0, -2}
end
return {0, redis.call('pttl', KEYS[1])}
