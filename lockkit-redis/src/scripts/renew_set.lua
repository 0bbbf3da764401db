-- Renew shared leases (read locks, semaphore permits): owner-checked, batched like renew.lua.
-- KEYS[i] holders zset; ARGV[2i-1] member, ARGV[2i] lease ms
-- Returns one entry per key: 1 renewed, 0 gone (expired, or force-released).
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #KEYS do
  local member, ms = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  local score = redis.call('zscore', KEYS[i], member)
  if score and tonumber(score) > now then
    redis.call('zadd', KEYS[i], 'xx', now + ms, member)
    if redis.call('pttl', KEYS[i]) < ms then
      redis.call('pexpire', KEYS[i], ms)
    end
    out[i] = 1
  else
    if score then
      redis.call('zrem', KEYS[i], member)
    end
    out[i] = 0
  end
end
return out
