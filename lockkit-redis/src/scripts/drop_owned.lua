-- A fixed lease reached its local deadline, or the client closes: remove our hold now if the
-- server still has it, so the server agrees with the guard (which turns Lost next).
-- Owner-checked; never re-creates.
-- KEYS[1] lock hash or holders zset; ARGV[1] owner field or member, ARGV[2] 'h' or 's'
local function redisson_name(prefix, name)
  if string.find(name, '{', 1, true) then
    return prefix .. ':' .. name
  end
  return prefix .. ':{' .. name .. '}'
end
if ARGV[2] == 'h' then
  local mode = redis.pcall('hget', KEYS[1], 'mode')
  local holds = redis.pcall('hget', KEYS[1], ARGV[1])
  if type(mode) == 'string' and type(holds) == 'string' then
    -- Redisson's RReadWriteLock layout (redisson_compat): end the hold the way its unlock does.
    redis.call('hdel', KEYS[1], ARGV[1])
    if string.sub(ARGV[1], -6) ~= ':write' then
      local base = string.find(KEYS[1], '{', 1, true) and KEYS[1] or ('{' .. KEYS[1] .. '}')
      for n = 1, tonumber(holds) or 0 do
        redis.call('del', base .. ':' .. ARGV[1] .. ':rwlock_timeout:' .. n)
      end
    end
    if redis.call('hlen', KEYS[1]) <= 1 then
      redis.call('del', KEYS[1])
    elseif mode == 'write' and string.sub(ARGV[1], -6) == ':write' then
      redis.call('hset', KEYS[1], 'mode', 'read')
    end
    redis.call('publish', redisson_name('redisson_rwlock', KEYS[1]), '1')
  else
    redis.pcall('hdel', KEYS[1], ARGV[1])
  end
else
  local name = string.match(KEYS[1], '^{[^}]*}:lockkit%-permits:(.+)$')
  if redis.pcall('zrem', KEYS[1], ARGV[1]) == 1 and name then
    -- Redisson's RSemaphore layout (redisson_compat): the permits go back into the count.
    local free = redis.call('incrby', name, tonumber(string.match(ARGV[1], '|(%d+)$') or '1'))
    redis.call('publish', redisson_name('redisson_sc', name), free)
  end
end
return 1
