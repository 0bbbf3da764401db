-- Read a lock without changing it.
-- KEYS[1] lock hash
-- Returns {pttl, field, count, field, count, ...}; pttl is -2 when the lock is free.
local t = redis.call('type', KEYS[1]).ok
if t == 'none' then
  return {-2}
end
if t ~= 'hash' then
  return redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[1] .. ' holds a ' .. t .. ', not a lock')
end
local out = {redis.call('pttl', KEYS[1])}
local all = redis.call('hgetall', KEYS[1])
for i = 1, #all do
  out[#out + 1] = all[i]
end
return out
