-- Release a mutex if ARGV[1] still owns it; idempotent under retries.
-- KEYS[1] lock hash, KEYS[2] unlock latch of this ownership
-- ARGV[1] owner field, ARGV[2] channel, ARGV[3] latch TTL in ms
-- Returns 1 when released (now or by an earlier attempt of the same release), 0 when not ours.
if redis.call('exists', KEYS[2]) == 1 then
  return 1
end
if redis.call('type', KEYS[1]).ok ~= 'hash' then
  return 0
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('del', KEYS[1])
redis.call('publish', ARGV[2], '0')
redis.call('set', KEYS[2], '1', 'px', ARGV[3])
return 1
