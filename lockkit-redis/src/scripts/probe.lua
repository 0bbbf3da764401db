-- Read a lock without changing it.
-- KEYS[1] lock hash
-- Returns its pttl: -2 when the lock is free, -1 when it has no expiry.
local t = redis.call('type', KEYS[1]).ok
if t == 'none' then
  return -2
end
if t ~= 'hash' then
  return redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[1] .. ' holds a ' .. t .. ', not a lock')
end
return redis.call('pttl', KEYS[1])
