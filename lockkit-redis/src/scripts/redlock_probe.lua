-- Redlock: read the lock on this master without changing it.
-- KEYS[1] lock. Returns {pttl, owner}: {-2, ''} when free here, a pttl of -1 when it has no
-- expiry; WRONGTYPE when the key holds something else.
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return {-2, ''}
end
if kind ~= 'string' then
  return redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a Redlock lock')
end
return {redis.call('pttl', KEYS[1]), redis.call('get', KEYS[1])}
