-- Admin: release a read-write lock or semaphore whoever holds it, and wake waiters.
-- KEYS[1] write hash, KEYS[2] holders zset; ARGV[1] channel, ARGV[2] holders' channel prefix
-- (tell_holders.lua)
-- Returns 1 when anything was held, 0 when free. A key of another type is left as it is: an
-- error, as for every other command on the lock.
local want = { 'hash', 'zset' }
local kinds = {}
for i = 1, 2 do
  kinds[i] = redis.call('type', KEYS[i]).ok
  if kinds[i] ~= 'none' and kinds[i] ~= want[i] then
    return redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[i] .. ' holds a ' .. kinds[i] .. ', not a lock')
  end
end
for i = 1, 2 do
  tell_holders(ARGV[2], KEYS[i], kinds[i])
end
local n = redis.call('del', KEYS[1], KEYS[2])
if n > 0 then
  redis.call('publish', ARGV[1], '0')
  return 1
end
return 0
