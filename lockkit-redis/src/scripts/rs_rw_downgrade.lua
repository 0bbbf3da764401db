-- Turn a write hold on Redisson's RReadWriteLock layout into a read hold atomically.
-- KEYS[1] lock hash; ARGV[1] write field, ARGV[2] read field, ARGV[3] lease ms,
-- ARGV[4] rwlock_timeout base, ARGV[5] channel
-- A key of another type is not ours; any other error is the caller's to see (see typed_call).
local ok, ours = typed_call('hexists', KEYS[1], ARGV[1])
if not ok and ours then
  return ours
end
if ours ~= 1 then
  -- A resend of a downgrade that was applied finds our read hold in place of the write hold.
  if redis.call('hget', KEYS[1], ARGV[2])
      and redis.call('exists', ARGV[4] .. ':' .. ARGV[2] .. ':rwlock_timeout:1') == 1 then
    return 1
  end
  return 0
end
redis.call('hdel', KEYS[1], ARGV[1])
local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
redis.call('set', ARGV[4] .. ':' .. ARGV[2] .. ':rwlock_timeout:' .. n, 1, 'px', ARGV[3])
redis.call('hset', KEYS[1], 'mode', 'read')
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('pexpire', KEYS[1], ARGV[3])
end
-- Waiting readers may join now.
redis.call('publish', ARGV[5], '1')
return 1
