-- A waiting acquire gives up (its wait ran out, it failed, or its future was dropped): leave the
-- queue; drop the lock if a hand-off (or an attempt whose reply was lost) made us its owner; and
-- hand a free lock on to the next waiter.
-- KEYS[1] lock hash, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] waiters
-- ARGV[1] owner, ARGV[2] fencing counter TTL ms
-- For an election (see elect.lua) also KEYS[5] leader hash, KEYS[6] election channel: an attempt
-- whose reply was lost may have made us the leader.
redis.call('lrem', KEYS[3], 1, ARGV[1])
redis.call('hdel', KEYS[4], ARGV[1])
local _, err = hdel_ours(KEYS[1], ARGV[1])
if err then
  return err
end
if KEYS[5] then
  unlead(KEYS[5], KEYS[6], ARGV[1])
end
if redis.call('exists', KEYS[1]) == 0 then
  hand_off(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2])
end
return 1
