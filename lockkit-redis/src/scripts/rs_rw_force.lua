-- Admin: release a read-write lock on Redisson's layout whoever holds it, and wake everyone.
-- KEYS[1] lock hash; ARGV[1] rwlock_timeout base, ARGV[2] channel, ARGV[3] holders' channel
-- prefix (tell_holders.lua)
-- Returns 1 when it was held, 0 when free.
local t = redis.call('type', KEYS[1]).ok
if t == 'none' then
  return 0
end
if t ~= 'hash' then
  return redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[1] .. ' is not a read-write lock')
end
local all = redis.call('hgetall', KEYS[1])
for i = 1, #all, 2 do
  local count = tonumber(all[i + 1])
  if all[i] ~= 'mode' and count then
    for n = 1, count do
      redis.call('del', ARGV[1] .. ':' .. all[i] .. ':rwlock_timeout:' .. n)
    end
  end
end
tell_holders(ARGV[3], KEYS[1], t)
redis.call('del', KEYS[1])
redis.call('publish', ARGV[2], '1')
return 1
