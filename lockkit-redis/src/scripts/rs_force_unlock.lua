-- Admin: release a mutex in Redisson's layout (redisson_compat) whoever holds it, and wake a
-- waiter. KEYS[1] lock hash, KEYS[2] fair queue; ARGV[1] channel
-- Returns 1 when it was held, 0 when free.
local t = redis.call('type', KEYS[1]).ok
if t == 'none' then
  return 0
end
if t ~= 'hash' then
  return redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[1] .. ' holds a ' .. t .. ', not a lock')
end
redis.call('del', KEYS[1])
local next = redis.call('lindex', KEYS[2], 0)
redis.call('publish', ARGV[1], next or '0')
return 1
