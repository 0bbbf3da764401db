-- Release a mutex in Redisson's layout (redisson_compat) if ARGV[1] still owns it, announcing it
-- as Redisson's RLock and RFairLock do; idempotent under retries.
-- KEYS[1] lock hash, KEYS[2] unlock latch of this ownership, KEYS[3] fair queue,
-- KEYS[4] fair deadlines
-- ARGV[1] owner field, ARGV[2] lock channel, ARGV[3] latch TTL in ms, ARGV[4] '1' for a fair
-- holder, ARGV[5] now (client ms)
-- Returns 1 when released (now or by an earlier attempt of the same release), 0 when not ours.
-- Removing the only field deletes the hash; a key of another type is not ours.
local removed, err = hdel_ours(KEYS[1], ARGV[1])
if err then
  return err
end
if removed == 1 then
  -- The first live fair waiter is woken by name; a fair holder wakes only it (as RFairLock
  -- does), any other also sends RLock's '0' to every client.
  drop_stale(KEYS[3], KEYS[4], tonumber(ARGV[5]))
  wake_next(KEYS[3], ARGV[2], ARGV[4] == '1')
  -- Owner fields are never reused, so the latch only has to answer retries of this release.
  redis.call('set', KEYS[2], '1', 'px', ARGV[3])
  return 1
end
return redis.call('exists', KEYS[2])
