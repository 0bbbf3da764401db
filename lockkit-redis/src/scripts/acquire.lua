-- Acquire a mutex for a fresh owner and issue its fencing token.
-- KEYS[1] lock hash (owner field -> hold count), KEYS[2] fencing counter
-- ARGV[1] owner field, ARGV[2] lease in ms, ARGV[3] fencing counter TTL in ms
-- Returns {1, token} when acquired, {0, pttl of the holder} when busy.
local t = redis.call('type', KEYS[1]).ok
if t == 'hash' then
  return {0, redis.call('pttl', KEYS[1])}
end
if t ~= 'none' then
  return redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[1] .. ' holds a ' .. t .. ', not a lock')
end
local ft = redis.call('type', KEYS[2]).ok
if ft ~= 'string' and ft ~= 'none' then
  return redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[2] .. ' holds a ' .. ft .. ', not a fencing counter')
end
local last = tonumber(redis.call('get', KEYS[2]) or '0')
if last == nil then
  return redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[2] .. ' is not a fencing counter')
end
-- Token = max(counter + 1, server time in microseconds): the time floor keeps tokens increasing
-- after the counter key expired, so the counter need not live forever.
local now = redis.call('time')
local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
if last >= token then
  token = last + 1
end
redis.call('set', KEYS[2], string.format('%.0f', token), 'px', ARGV[3])
redis.call('hset', KEYS[1], ARGV[1], 1)
redis.call('pexpire', KEYS[1], ARGV[2])
return {1, token}
