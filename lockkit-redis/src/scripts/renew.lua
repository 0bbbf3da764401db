-- Renew many held locks in one call (the watchdog batches up to 100).
-- KEYS[i] lock hash; ARGV[2i-1] owner field, ARGV[2i] lease in ms
-- Returns one entry per key: 1 renewed, 0 gone or owned by someone else.
local out = {}
for i = 1, #KEYS do
  local owner, ms = ARGV[2 * i - 1], ARGV[2 * i]
  if redis.call('type', KEYS[i]).ok == 'hash' and redis.call('hexists', KEYS[i], owner) == 1 then
    redis.call('pexpire', KEYS[i], ms)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
