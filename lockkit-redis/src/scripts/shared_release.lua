-- Release of a write lock ('w'), a read lock or semaphore permits ('s'), idempotent like the
-- mutex release; also the way a waiting writer withdraws its intent ('i').
-- KEYS[1] write hash, KEYS[2] holders zset, KEYS[3] latch, KEYS[4] waiting writers zset
-- ARGV[1] member, ARGV[2] channel, ARGV[3] latch TTL ms, ARGV[4] mode
local gone
if ARGV[4] == 'w' then
  local removed, err = hdel_ours(KEYS[1], ARGV[1])
  if err then
    return err
  end
  gone = removed == 1
elseif ARGV[4] == 's' then
  gone = redis.call('zrem', KEYS[2], ARGV[1]) == 1
else
  if redis.call('zrem', KEYS[4], ARGV[1]) == 1 then
    redis.call('publish', ARGV[2], '0')
  end
  return 1
end
if gone then
  redis.call('publish', ARGV[2], '0')
  redis.call('set', KEYS[3], '1', 'px', ARGV[3])
  return 1
end
return redis.call('exists', KEYS[3])
