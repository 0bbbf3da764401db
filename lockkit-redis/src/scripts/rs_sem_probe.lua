-- Free permits of a semaphore on Redisson's RSemaphore layout, counting lockkit leases that
-- have ended as free (the next acquire returns them). Read-only.
-- KEYS[1] free permits, KEYS[2] lockkit leases; ARGV[1] capacity
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ended, leased = 0, 0
local all = redis.call('zrange', KEYS[2], 0, -1, 'withscores')
for i = 1, #all, 2 do
  local n = tonumber(string.match(all[i], '|(%d+)$') or '1')
  if tonumber(all[i + 1]) <= now then
    ended = ended + n
  else
    leased = leased + n
  end
end
local ok, free = typed_call('get', KEYS[1])
if not ok or (free and not tonumber(free)) then
  return (not ok and free) or redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[1] .. ' is not a semaphore')
end
if not free then
  return math.max(0, tonumber(ARGV[1]) - leased)
end
return tonumber(free) + ended
