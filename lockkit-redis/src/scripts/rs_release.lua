-- Release a mutex in Redisson's layout (redisson_compat) if ARGV[1] still owns it, announcing it
-- as RLock's unlock does; idempotent under retries.
-- KEYS[1] lock hash, KEYS[2] unlock latch of this ownership, KEYS[3] fair queue
-- ARGV[1] owner field, ARGV[2] channel, ARGV[3] latch TTL in ms, ARGV[4] '1' for a fair holder
-- Returns 1 when released (now or by an earlier attempt of the same release), 0 when not ours.
-- Removing the only field deletes the hash; a key of another type is not ours.
if hdel_ours(KEYS[1], ARGV[1]) == 1 then
  -- A fair holder wakes the first fair waiter by name; otherwise Redisson's `0` wakes one
  -- waiter of each client (Redisson's and lockkit's alike).
  local next = ARGV[4] == '1' and redis.call('lindex', KEYS[3], 0)
  redis.call('publish', ARGV[2], next or '0')
  -- Owner fields are never reused, so the latch only has to answer retries of this release.
  redis.call('set', KEYS[2], '1', 'px', ARGV[3])
  return 1
end
return redis.call('exists', KEYS[2])
