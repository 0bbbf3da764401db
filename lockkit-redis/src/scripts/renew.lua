-- Renew many held locks in one call (the watchdog batches up to 100).
-- KEYS[i] lock hash; ARGV[2i-1] owner field, ARGV[2i] lease in ms
-- Returns one entry per key: 1 renewed, 0 gone or owned by someone else.
local out = {}
for i = 1, #KEYS do
  local owner, ms = ARGV[2 * i - 1], ARGV[2 * i]
  if redis.call('type', KEYS[i]).ok == 'hash' and redis.call('hexists', KEYS[i], owner) == 1 then
    if redis.call('hexists', KEYS[i], 'mode') == 1 and string.sub(owner, -6) ~= ':write' then
      -- A reader on Redisson's RReadWriteLock layout (redisson_compat): its holds have their
      -- own rwlock_timeout keys, and the hash lives as long as its longest holder. A writer's
      -- hash is set to its lease, as RedissonWriteLock renews it.
      local base = string.find(KEYS[i], '{', 1, true) and KEYS[i] or ('{' .. KEYS[i] .. '}')
      for n = 1, tonumber(redis.call('hget', KEYS[i], owner)) or 0 do
        redis.call('pexpire', base .. ':' .. owner .. ':rwlock_timeout:' .. n, ms)
      end
      if redis.call('pttl', KEYS[i]) < tonumber(ms) then
        redis.call('pexpire', KEYS[i], ms)
      end
    else
      redis.call('pexpire', KEYS[i], ms)
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
