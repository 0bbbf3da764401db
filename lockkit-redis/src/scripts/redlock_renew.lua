-- Redlock: renew many held locks on this master in one call (the watchdog batches them; extend
-- sends one).
-- KEYS[i] lock; ARGV[2i-1] owner, ARGV[2i] expiry ms
-- Returns one entry per key: 1 renewed, 0 gone or owned by someone else here.
local out = {}
for i = 1, #KEYS do
  if redis.pcall('get', KEYS[i]) == ARGV[2 * i - 1] then
    redis.call('pexpire', KEYS[i], ARGV[2 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
