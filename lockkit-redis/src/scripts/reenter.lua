-- Add a hold to an ownership that is still ours.
-- KEYS[1] lock hash; ARGV[1] owner field
-- Returns the new hold count, or 0 when the lock is no longer ours.
if redis.call('type', KEYS[1]).ok ~= 'hash' or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
return redis.call('hincrby', KEYS[1], ARGV[1], 1)
