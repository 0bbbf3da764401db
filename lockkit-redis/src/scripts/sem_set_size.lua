-- Admin: a native semaphore's size for every handle, and a wake-up for its waiters (those that
-- now fit take their permits; those asking for more than the new size are refused).
-- KEYS[1] size; ARGV[1] the new size, ARGV[2] channel
-- Returns the size stored before (0: none).
local ok, old = typed_call('get', KEYS[1])
if not ok or (old and not tonumber(old)) then
  return (not ok and old) or redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[1] .. ' is not a semaphore size')
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('publish', ARGV[2], '0')
return tonumber(old) or 0
