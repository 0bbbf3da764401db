-- Admin: release a read-write lock or semaphore whoever holds it, and wake waiters.
-- KEYS[1] write hash, KEYS[2] holders zset; ARGV[1] channel, ARGV[2] holders' channel prefix
-- (tell_holders.lua)
-- Returns 1 when anything was held, 0 when free.
for i = 1, 2 do
  tell_holders(ARGV[2], KEYS[i], redis.call('type', KEYS[i]).ok)
end
local n = redis.call('del', KEYS[1], KEYS[2])
if n > 0 then
  redis.call('publish', ARGV[1], '0')
  return 1
end
return 0
