-- Admin: release a mutex in Redisson's layout (redisson_compat) whoever holds it, and wake the
-- first fair waiter and one waiter of each client.
-- KEYS[1] lock hash, KEYS[2] fair queue, KEYS[3] fair deadlines; ARGV[1] lock channel,
-- ARGV[2] now (client ms), ARGV[3] holders' channel prefix (tell_holders.lua)
-- Returns 1 when it was held, 0 when free.
local t = redis.call('type', KEYS[1]).ok
if t == 'none' then
  return 0
end
if t ~= 'hash' then
  return redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[1] .. ' holds a ' .. t .. ', not a lock')
end
tell_holders(ARGV[3], KEYS[1], t)
redis.call('del', KEYS[1])
drop_stale(KEYS[2], KEYS[3], tonumber(ARGV[2]))
wake_next(KEYS[2], ARGV[1], false)
return 1
