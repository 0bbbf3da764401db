-- Release on Redisson's RReadWriteLock layout (redisson_compat): a write hold ('w'), a read
-- hold ('s'), or a waiting writer's intent ('i'); idempotent like the mutex release.
-- KEYS[1] lock hash, KEYS[2] latch, KEYS[3] waiting lockkit writers
-- ARGV[1] field, ARGV[2] channel, ARGV[3] latch TTL ms, ARGV[4] mode, ARGV[5] rwlock_timeout base
-- Every wake-up is Redisson's READ_UNLOCK message '1', which wakes all waiters on both sides.
if ARGV[4] == 'i' then
  if redis.call('zrem', KEYS[3], ARGV[1]) == 1 then
    redis.call('publish', ARGV[2], '1')
  end
  return 1
end
-- A key of another type is not ours; any other error is the caller's to see (see typed_call).
local ok, holds = typed_call('hget', KEYS[1], ARGV[1])
if not ok and holds then
  return holds
end
if type(holds) ~= 'string' then
  return redis.call('exists', KEYS[2])
end
redis.call('hdel', KEYS[1], ARGV[1])
local free = redis.call('hlen', KEYS[1]) <= 1
if not free then
  if ARGV[4] == 'w' then
    -- Only the writer's own reads are left (Redisson lets a writer read).
    redis.call('hset', KEYS[1], 'mode', 'read')
  else
    for n = 1, tonumber(holds) do
      redis.call('del', ARGV[5] .. ':' .. ARGV[1] .. ':rwlock_timeout:' .. n)
    end
    -- As Redisson's read unlock: the hash lives as long as its longest remaining reader.
    local longest = -3
    local all = redis.call('hgetall', KEYS[1])
    for i = 1, #all, 2 do
      local field, count = all[i], tonumber(all[i + 1])
      if field ~= 'mode' and count then
        for n = 1, count do
          longest = math.max(longest, redis.call('pttl', ARGV[5] .. ':' .. field .. ':rwlock_timeout:' .. n))
        end
      end
    end
    if longest > 0 then
      redis.call('pexpire', KEYS[1], longest)
    elseif redis.call('hget', KEYS[1], 'mode') ~= 'write' then
      free = true
    end
  end
elseif ARGV[4] ~= 'w' then
  for n = 1, tonumber(holds) do
    redis.call('del', ARGV[5] .. ':' .. ARGV[1] .. ':rwlock_timeout:' .. n)
  end
end
if free then
  redis.call('del', KEYS[1])
end
redis.call('publish', ARGV[2], '1')
redis.call('set', KEYS[2], '1', 'px', ARGV[3])
return 1
