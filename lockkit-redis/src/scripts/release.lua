-- Release a native mutex if ARGV[1] still owns it, and hand it to the first live waiter;
-- idempotent under retries.
-- KEYS[1] lock hash, KEYS[2] unlock latch of this ownership, KEYS[3] fencing counter,
-- KEYS[4] queue, KEYS[5] waiters
-- ARGV[1] owner, ARGV[2] latch TTL ms, ARGV[3] fencing counter TTL ms
-- For an election (see elect.lua) also KEYS[6] leader hash, KEYS[7] election channel.
-- Returns 1 when released (now or by an earlier attempt of the same release), 0 when not ours.
-- A key of another type is not ours; any other error is the caller's to see.
local removed, err = hdel_ours(KEYS[1], ARGV[1])
if err then
  return err
end
if removed == 1 then
  -- Owner fields are never reused, so the latch only has to answer retries of this release.
  redis.call('set', KEYS[2], '1', 'px', ARGV[2])
  if KEYS[6] then
    unlead(KEYS[6], KEYS[7], ARGV[1])
  end
  -- Our field was the hash's only one, so the lock is free. A counter of another type fails the
  -- hand-off, not the release; the next waiter's own attempt reports it.
  hand_off(KEYS[1], KEYS[3], KEYS[4], KEYS[5], ARGV[3])
  return 1
end
return redis.call('exists', KEYS[2])
