-- Renew many elected leaders in one call (the watchdog batches up to 100): each lock hash and
-- its leader hash `<lock>:leader` (same hash tag, so the same slot).
-- KEYS[i] lock hash; ARGV[2i-1] owner field, ARGV[2i] lease in ms
-- Returns one entry per key: 1 renewed, 0 gone, owned by someone else, or no longer leading
-- (its leader hash was deleted or names another owner).
local out = {}
for i = 1, #KEYS do
  local owner, ms = ARGV[2 * i - 1], ARGV[2 * i]
  local leader = KEYS[i] .. ':leader'
  if redis.call('type', KEYS[i]).ok == 'hash' and redis.call('hexists', KEYS[i], owner) == 1
    and redis.call('type', leader).ok == 'hash' and redis.call('hget', leader, 'owner') == owner then
    redis.call('pexpire', KEYS[i], ms)
    redis.call('pexpire', leader, ms)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
