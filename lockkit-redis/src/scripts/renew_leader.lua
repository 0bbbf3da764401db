-- Renew many elected leaders in one call (the watchdog batches up to 100): each lock hash with
-- its leader hash.
-- KEYS[2i-1] lock hash, KEYS[2i] its leader hash; ARGV[2i-1] owner field, ARGV[2i] lease in ms
-- Returns one entry per leader: 1 renewed, 0 gone, owned by someone else, or no longer leading
-- (its leader hash was deleted or names another owner).
local out = {}
for i = 1, #KEYS / 2 do
  local lock, leader = KEYS[2 * i - 1], KEYS[2 * i]
  local owner, ms = ARGV[2 * i - 1], ARGV[2 * i]
  if redis.call('type', lock).ok == 'hash' and redis.call('hexists', lock, owner) == 1
    and redis.call('type', leader).ok == 'hash' and redis.call('hget', leader, 'owner') == owner then
    redis.call('pexpire', lock, ms)
    redis.call('pexpire', leader, ms)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
