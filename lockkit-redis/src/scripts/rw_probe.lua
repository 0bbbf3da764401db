-- Whether a read-write lock or semaphore has live holders, and how many permits are in use.
-- KEYS[1] write hash, KEYS[2] holders zset
-- Returns {write held (0/1), permits in use by live shared holders}
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local used = 0
for _, m in ipairs(redis.call('zrangebyscore', KEYS[2], '(' .. now, '+inf')) do
  used = used + tonumber(string.match(m, '|(%d+)$') or '1')
end
return {redis.call('exists', KEYS[1]), used}
