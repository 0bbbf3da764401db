-- Write-lock acquire: exclusive of writers and readers. A writer that has to wait registers its
-- intent (refreshed while it waits), which keeps new readers out: writers do not starve.
-- KEYS[1] write hash, KEYS[2] readers zset, KEYS[3] waiting writers zset, KEYS[4] fencing counter
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] fence TTL ms, ARGV[4] intent timeout ms
-- Returns {1, token} when acquired, {0, ms to wait at most} when not.
local t = redis.call('time')
local now = now_ms(t)
redis.call('zremrangebyscore', KEYS[2], '-inf', now)
redis.call('zremrangebyscore', KEYS[3], '-inf', now)
local held, err = lock_fields(KEYS[1])
if not held then
  return err
end
-- Ours already: a resent request (redis-rs resends after a dropped connection) whose first run
-- took the lock takes it up again, with our lease from now and a new token (the first one was
-- never seen), as the mutex's does; never busy on our own hold.
local ours = held > 0 and redis.call('hexists', KEYS[1], ARGV[1]) == 1
if not ours and (held > 0 or redis.call('zcard', KEYS[2]) > 0) then
  redis.call('zadd', KEYS[3], now + tonumber(ARGV[4]), ARGV[1])
  -- Only ever raised: a client with a shorter timeout must not expire another's live intent.
  if redis.call('pttl', KEYS[3]) < tonumber(ARGV[4]) * 2 then
    redis.call('pexpire', KEYS[3], tonumber(ARGV[4]) * 2)
  end
  if held > 0 then
    return {0, redis.call('pttl', KEYS[1])}
  end
  return {0, -2}
end
redis.call('zrem', KEYS[3], ARGV[1])
return take_hash(KEYS[1], ARGV[1], ARGV[2], KEYS[4], ARGV[3], t)
