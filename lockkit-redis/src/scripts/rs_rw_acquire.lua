-- Read or write acquire on Redisson's RReadWriteLock layout (redisson_compat).
-- KEYS[1] lock hash ('mode' -> read|write, reader '<owner>' / writer '<owner>:write' -> holds),
-- KEYS[2] waiting lockkit writers (zset field -> deadline), KEYS[3] lockkit fencing counter
-- ARGV[1] field, ARGV[2] lease ms, ARGV[3] fence TTL ms, ARGV[4] 'r' or 'w',
-- ARGV[5] writer intent timeout ms, ARGV[6] base of the readers' rwlock_timeout keys, ARGV[7] channel
-- Returns {1, token} when acquired, {0, ms to wait at most, or -2} when not.
local t = redis.call('time')
local now = now_ms(t)
local ok, mode = typed_call('hget', KEYS[1], 'mode')
if not ok then
  return mode or redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[1] .. ' is not a read-write lock')
end
if mode then
  -- A reader whose every rwlock_timeout key is gone has ended (its process died, or its fixed
  -- lease ran out); Redisson would keep it until the whole hash expires.
  local all = redis.call('hgetall', KEYS[1])
  for i = 1, #all, 2 do
    local field, holds = all[i], tonumber(all[i + 1])
    if field ~= 'mode' and string.sub(field, -6) ~= ':write' and holds then
      local alive = false
      for n = 1, holds do
        if redis.call('pttl', ARGV[6] .. ':' .. field .. ':rwlock_timeout:' .. n) ~= -2 then
          alive = true
          break
        end
      end
      if not alive then
        redis.call('hdel', KEYS[1], field)
      end
    end
  end
  if redis.call('hlen', KEYS[1]) <= 1 then
    redis.call('del', KEYS[1])
    redis.call('publish', ARGV[7], '1')
    mode = false
  end
end
redis.call('zremrangebyscore', KEYS[2], '-inf', now)
local lease = tonumber(ARGV[2])
-- Fields are never reused, so a live one of ours is a resent request (redis-rs resends after a
-- dropped connection) whose first run took the lock: it is taken up again, with our lease from
-- now and a new token (the first one was never seen), and counted once; never busy on our own
-- hold, and a resent write registers no intent.
local holds = mode and tonumber(redis.call('hget', KEYS[1], ARGV[1]))
-- The token is issued before anything is written: a fencing key that is not a counter answers
-- with an error and leaves no hold behind.
local token, fence_err
if ARGV[4] == 'r' then
  if not holds then
    if mode == 'write' then
      return {0, redis.call('pttl', KEYS[1])}
    end
    -- A waiting lockkit writer keeps new lockkit readers out (Redisson readers do not look).
    if redis.call('zcard', KEYS[2]) > 0 then
      return {0, -2}
    end
  end
  token, fence_err = next_token(KEYS[3], ARGV[3], t)
  if not token then
    return fence_err
  end
  if holds then
    for n = 1, holds do
      redis.call('set', ARGV[6] .. ':' .. ARGV[1] .. ':rwlock_timeout:' .. n, 1, 'px', lease)
    end
  else
    redis.call('hset', KEYS[1], 'mode', 'read')
    local n = redis.call('hincrby', KEYS[1], ARGV[1], 1)
    redis.call('set', ARGV[6] .. ':' .. ARGV[1] .. ':rwlock_timeout:' .. n, 1, 'px', lease)
  end
  if redis.call('pttl', KEYS[1]) < lease then
    redis.call('pexpire', KEYS[1], lease)
  end
else
  if mode and not (mode == 'write' and holds) then
    redis.call('zadd', KEYS[2], now + tonumber(ARGV[5]), ARGV[1])
    -- Only ever raised: a client with a shorter timeout must not expire another's live intent.
    if redis.call('pttl', KEYS[2]) < tonumber(ARGV[5]) * 2 then
      redis.call('pexpire', KEYS[2], tonumber(ARGV[5]) * 2)
    end
    return {0, redis.call('pttl', KEYS[1])}
  end
  token, fence_err = next_token(KEYS[3], ARGV[3], t)
  if not token then
    return fence_err
  end
  redis.call('zrem', KEYS[2], ARGV[1])
  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[1], 1)
  redis.call('pexpire', KEYS[1], lease)
end
return {1, token}
