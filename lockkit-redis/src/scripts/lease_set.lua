-- Shared-lease acquire for read locks and semaphores: holders are members of a sorted set scored
-- by their lease deadline (server ms), so a dead holder's share comes back when its lease ends.
-- KEYS[1] write hash (read locks; a key that never exists for semaphores), KEYS[2] holders zset,
-- KEYS[3] waiting writers zset (blocks new readers), KEYS[4] fencing counter, KEYS[5] the
-- semaphore's size (a read lock passes its holders zset, never read)
-- ARGV[1] member ('<owner>' or '<owner>|<permits>'), ARGV[2] lease ms, ARGV[3] fence TTL ms,
-- ARGV[4] permits wanted, ARGV[5] the size asked for (0: unlimited, read locks; -1: the
-- stored size)
-- Returns {1, token} when acquired, {0, ms to wait at most} when not; for a semaphore whose
-- size refuses the request, {-1, 0} (no size stored, none asked for), {-2, stored size} (another
-- size asked for), {-3, stored size} (more permits than that).
local t = redis.call('time')
local now = now_ms(t)
local capacity = tonumber(ARGV[5])
redis.call('zremrangebyscore', KEYS[2], '-inf', now)
redis.call('zremrangebyscore', KEYS[3], '-inf', now)
-- Members are never reused, so a live one of ours is a resent request (redis-rs resends after a
-- dropped connection) whose first run took the share: it is taken up again, with our lease from
-- now and a new token (the first one was never seen), and counted once.
if not redis.call('zscore', KEYS[2], ARGV[1]) then
  if capacity ~= 0 then
    -- The semaphore's size, read (and stored when absent) in the step that admits; a resent
    -- request whose first run took its permits is not asked again.
    local ok, stored = typed_call('get', KEYS[5])
    if not ok or (stored and not tonumber(stored)) then
      return (not ok and stored) or redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[5] .. ' is not a semaphore size')
    end
    stored = tonumber(stored)
    if not stored then
      if capacity < 0 then
        return {-1, 0}
      end
      redis.call('set', KEYS[5], capacity)
      stored = capacity
    elseif capacity > 0 and capacity ~= stored then
      return {-2, stored}
    end
    if tonumber(ARGV[4]) > stored then
      return {-3, stored}
    end
    capacity = stored
  end
  -- The write lock (read locks; for a semaphore a key that never exists): a key of another
  -- type there is an error, not a writer to wait for.
  local held, err = lock_fields(KEYS[1])
  if not held then
    return err
  end
  if held > 0 then
    return {0, redis.call('pttl', KEYS[1])}
  end
  if redis.call('zcard', KEYS[3]) > 0 then
    return {0, -2}
  end
  if capacity > 0 then
    local used = 0
    for _, m in ipairs(redis.call('zrange', KEYS[2], 0, -1)) do
      used = used + tonumber(string.match(m, '|(%d+)$') or '1')
    end
    if used + tonumber(ARGV[4]) > capacity then
      local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
      return {0, math.max(1, tonumber(first[2]) - now)}
    end
  end
end
local token, fence_err = next_token(KEYS[4], ARGV[3], t)
if not token then
  return fence_err
end
local deadline = now + tonumber(ARGV[2])
redis.call('zadd', KEYS[2], deadline, ARGV[1])
if redis.call('pttl', KEYS[2]) < tonumber(ARGV[2]) then
  redis.call('pexpire', KEYS[2], ARGV[2])
end
return {1, token}
