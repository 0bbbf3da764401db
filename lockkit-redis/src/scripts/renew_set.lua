-- Renew shared leases (read locks, semaphore permits): owner-checked, batched like renew.lua.
-- KEYS[i] holders zset; ARGV[2i-1] member, ARGV[2i] lease ms
-- Returns one entry per key: 1 renewed, 0 gone (expired, or force-released).
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Redisson-compatible semaphores keep lockkit's leases in '{tag}:lockkit-permits:<name>' next
-- to Redisson's count '<name>': a lease leaves the set only by giving its permits back.
local function give_back(key, member)
  local name = string.match(key, '^{[^}]*}:lockkit%-permits:(.+)$')
  if name then
    local free = redis.call('incrby', name, tonumber(string.match(member, '|(%d+)$') or '1'))
    local tagged = string.find(name, '{', 1, true)
    redis.call('publish', tagged and ('redisson_sc:' .. name) or ('redisson_sc:{' .. name .. '}'), free)
  end
end
local out = {}
for i = 1, #KEYS do
  local member, ms = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  if string.find(KEYS[i], '}:lockkit-permits:', 1, true) then
    -- Dead lockkit holders' permits go back at live holders' renewals too, so Redisson waiters
    -- get them without waiting for a lockkit acquire.
    for _, m in ipairs(redis.call('zrangebyscore', KEYS[i], '-inf', now)) do
      if m ~= member and redis.call('zrem', KEYS[i], m) == 1 then
        give_back(KEYS[i], m)
      end
    end
  end
  local score = redis.call('zscore', KEYS[i], member)
  if score and tonumber(score) > now then
    redis.call('zadd', KEYS[i], 'xx', now + ms, member)
    if redis.call('pttl', KEYS[i]) < ms and not string.find(KEYS[i], '}:lockkit-permits:', 1, true) then
      redis.call('pexpire', KEYS[i], ms)
    end
    out[i] = 1
  else
    if score and redis.call('zrem', KEYS[i], member) == 1 then
      give_back(KEYS[i], member)
    end
    out[i] = 0
  end
end
return out
