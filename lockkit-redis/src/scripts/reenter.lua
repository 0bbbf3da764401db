-- Set the hold count of an ownership that is still ours, once however often the request is sent.
-- KEYS[1] lock hash; ARGV[1] owner field, ARGV[2] a hold count, ARGV[3] '-' to undo a reentry
-- whose answer was never seen (the count only shrinks to ARGV[2]: the guard's count), else a
-- reentry (the count only grows to ARGV[2]: 1 + the ownership's reentries the server has
-- confirmed, this one included)
-- Returns the hold count, or 0 when the lock is no longer ours.
-- A resent reentry (redis-rs resends after a dropped connection) counts once. The guard sends
-- one reentry at a time, and the next only after the undo of one whose answer it never saw, so
-- the server counts exactly the reentries the guard does.
if redis.call('type', KEYS[1]).ok ~= 'hash' or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1])) or 0
local want = tonumber(ARGV[2])
if (ARGV[3] == '-' and holds > want) or (ARGV[3] ~= '-' and holds < want) then
  redis.call('hset', KEYS[1], ARGV[1], want)
  return want
end
return holds
