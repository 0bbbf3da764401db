-- Redlock, admin: delete the lock on this master whoever holds it.
-- KEYS[1] lock; ARGV[1] holders' channel prefix (tell_holders.lua: the holder is told).
-- Returns 1 when a lock was deleted, 0 when there was none. A key of another type is not a
-- lock: it is kept, and WRONGTYPE is the answer.
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return 0
end
if kind ~= 'string' then
  return redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a Redlock lock')
end
tell_holder(ARGV[1], redis.call('get', KEYS[1]), KEYS[1])
return redis.call('del', KEYS[1])
