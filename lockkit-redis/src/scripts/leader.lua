-- Read an election's leader (read-only).
-- KEYS[1] lock hash, KEYS[2] leader hash
-- Returns {term or '', value or '', pttl of the lock (-2 when free, -1 without expiry)}: a term
-- only while the leader hash names the lock's owner (a lock handed to the next candidate leads
-- once that candidate takes it up).
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return {'', '', -2}
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a lock')
end
local pttl = redis.call('pttl', KEYS[1])
if redis.call('type', KEYS[2]).ok ~= 'hash' then
  return {'', '', pttl}
end
local leader = redis.call('hmget', KEYS[2], 'owner', 'term', 'value')
if not leader[1] or redis.call('hexists', KEYS[1], leader[1]) == 0 then
  return {'', '', pttl}
end
return {leader[2] or '', leader[3] or '', pttl}
