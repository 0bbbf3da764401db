-- Redlock: raise this master's fencing counter to the token the quorum issued, while ARGV[1]
-- still holds the lock here (so the next holder's token from this master is higher).
-- KEYS[1] lock, KEYS[2] fencing counter; ARGV[1] owner, ARGV[2] token, ARGV[3] counter TTL ms
-- Returns 1 when raised (or already at least that high), 0 when the lock is not ours here, and
-- WRONGTYPE (leaving it as it is) when the counter holds something else, as the acquire does.
if redis.pcall('get', KEYS[1]) ~= ARGV[1] then
  return 0
end
local prev = redis.pcall('get', KEYS[2])
if (type(prev) == 'table' and prev.err) or (prev and (not string.find(prev, '^[1-9]%d*$')
    or #prev > 16)) then
  return redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[2] .. ' is not a fencing counter')
end
if not prev or tonumber(prev) < tonumber(ARGV[2]) then
  redis.call('set', KEYS[2], ARGV[2], 'px', ARGV[3])
end
return 1
