-- Whether a read-write lock or semaphore has live holders, and how many permits are in use.
-- KEYS[1] write hash, KEYS[2] holders zset, KEYS[3] a semaphore's size (none for a RW lock)
-- Returns {write held (0/1), permits in use by live shared holders, the stored size (0: none)}
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local used = 0
for _, m in ipairs(redis.call('zrangebyscore', KEYS[2], '(' .. now, '+inf')) do
  used = used + tonumber(string.match(m, '|(%d+)$') or '1')
end
local size = 0
if KEYS[3] then
  local ok, stored = typed_call('get', KEYS[3])
  if not ok or (stored and not tonumber(stored)) then
    return (not ok and stored) or redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[3] .. ' is not a semaphore size')
  end
  size = tonumber(stored) or 0
end
local held, err = lock_fields(KEYS[1])
if not held then
  return err
end
return {held > 0 and 1 or 0, used, size}
