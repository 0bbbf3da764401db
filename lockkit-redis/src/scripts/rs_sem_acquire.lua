-- Permit acquire on Redisson's RSemaphore layout (redisson_compat): KEYS[1] holds the number of
-- free permits, as Redisson keeps it; lockkit's holders also lease theirs in KEYS[2], so a dead
-- lockkit holder's permits go back into the count when its lease ends.
-- KEYS[1] free permits (string), KEYS[2] lockkit leases (zset '<owner>|<n>' -> deadline),
-- KEYS[3] lockkit fencing counter
-- ARGV[1] member, ARGV[2] lease ms, ARGV[3] fence TTL ms, ARGV[4] permits wanted,
-- ARGV[5] capacity (the count a missing KEYS[1] starts from), ARGV[6] channel
-- Returns {1, token} when acquired, {0, ms to wait at most, or -2} when not.
local t = redis.call('time')
local now = now_ms(t)
local function permits(member)
  return tonumber(string.match(member, '|(%d+)$') or '1')
end
local ok, free = typed_call('get', KEYS[1])
if not ok or (free and not tonumber(free)) then
  return (not ok and free) or redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[1] .. ' is not a semaphore')
end
local back = 0
for _, m in ipairs(redis.call('zrangebyscore', KEYS[2], '-inf', now)) do
  back = back + permits(m)
end
redis.call('zremrangebyscore', KEYS[2], '-inf', now)
if not free then
  -- First use (like Redisson's trySetPermits): all permits but those still leased are free.
  local leased = 0
  for _, m in ipairs(redis.call('zrange', KEYS[2], 0, -1)) do
    leased = leased + permits(m)
  end
  free = math.max(0, tonumber(ARGV[5]) - leased)
  redis.call('set', KEYS[1], free)
else
  free = tonumber(free)
  if back > 0 then
    free = redis.call('incrby', KEYS[1], back)
    redis.call('publish', ARGV[6], free)
  end
end
local want = tonumber(ARGV[4])
-- Members are never reused, so a live lease of ours is a resent request (redis-rs resends after
-- a dropped connection) whose first run took the permits: it is taken up again, with our lease
-- from now and a new token (the first one was never seen); the count is not taken twice.
local ours = redis.call('zscore', KEYS[2], ARGV[1])
if not ours and free < want then
  local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
  if first[2] then
    return {0, math.max(1, tonumber(first[2]) - now)}
  end
  return {0, -2}
end
local token, fence_err = next_token(KEYS[3], ARGV[3], t)
if not token then
  return fence_err
end
if not ours then
  redis.call('decrby', KEYS[1], want)
end
-- No expiry on the leases: Redis drops the set when it is empty, and an expiring set would take
-- a dead holder's permits with it.
redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
return {1, token}
