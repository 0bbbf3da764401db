-- Add a hold to an ownership that is still ours, once however often the request is sent.
-- KEYS[1] lock hash; ARGV[1] owner field, ARGV[2] the hold count this reentry makes (1 + the
-- ownership's reentries so far, counted by the guard)
-- Returns the hold count, or 0 when the lock is no longer ours.
-- The count only grows to ARGV[2]: a resent reentry (redis-rs resends after a dropped
-- connection) counts once, and of two concurrent reentries, the one that arrives second leaves
-- the larger count.
if redis.call('type', KEYS[1]).ok ~= 'hash' or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1])) or 0
local want = tonumber(ARGV[2])
if holds < want then
  redis.call('hset', KEYS[1], ARGV[1], want)
  return want
end
return holds
