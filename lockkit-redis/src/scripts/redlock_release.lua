-- Redlock: release the lock on this master if ARGV[1] holds it (as every Redlock client does),
-- and tell the first lockkit waiter (see redlock_acquire.lua).
-- KEYS[1] lock, KEYS[2] waiters, KEYS[3] their deadlines; ARGV[1] owner, ARGV[2] the lock's
-- channel, ARGV[3] the id of a waiter that leaves (its place goes with it) or ''.
-- Returns 1 when deleted, 0 when not ours (or absent).
local released = 0
if redis.pcall('get', KEYS[1]) == ARGV[1] then
  released = redis.call('del', KEYS[1])
end
pcall(function()
  if ARGV[3] ~= '' then
    redis.call('zrem', KEYS[2], ARGV[3])
    redis.call('zrem', KEYS[3], ARGV[3])
  end
  if (released == 1 or ARGV[3] ~= '') and redis.call('exists', KEYS[2]) == 1 then
    local t = redis.call('time')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    -- The first waiter whose place has not lapsed.
    for _, id in ipairs(redis.call('zrange', KEYS[2], 0, 9)) do
      local deadline = tonumber(redis.call('zscore', KEYS[3], id))
      if deadline and deadline > now then
        redis.call('publish', ARGV[2], id)
        break
      end
    end
  end
end)
return released
