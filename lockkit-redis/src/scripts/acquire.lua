-- Acquire a mutex for a fresh owner and issue its fencing token.
-- KEYS[1] lock hash (owner field -> hold count), KEYS[2] fencing counter, KEYS[3] wake flag
-- ARGV[1] owner field, ARGV[2] lease in ms, ARGV[3] fencing counter TTL in ms
-- Returns {1, token} when acquired, {0, pttl of the holder} when busy. A busy attempt raises the
-- wake flag, so the next release publishes; the flag outlives the caller's wait (at most the
-- holder's pttl, or 1 s when it has none).
local held = redis.pcall('hlen', KEYS[1])
if type(held) == 'table' then
  local t = redis.call('type', KEYS[1]).ok
  return redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[1] .. ' holds a ' .. t .. ', not a lock')
end
if held > 0 then
  local pttl = redis.call('pttl', KEYS[1])
  redis.call('set', KEYS[3], '1', 'px', math.max(pttl, 0) + 1000)
  return {0, pttl}
end
-- Fencing token: max(counter + 1, server time in microseconds), stored back with a fresh TTL. It
-- increases when the counter key expired, and when a failover to a replica lost the counter's last
-- updates (up to the clock skew between the two nodes), since every token ever issued is at most
-- the issuing node's time (nothing counts a million acquisitions a second).
-- Redisson's RFencedLock counter (redisson_compat) is a plain INCR that never expires, as Redisson
-- keeps it.
local token
if string.sub(KEYS[2], 1, 20) == 'redisson_lock_token:' then
  token = redis.pcall('incr', KEYS[2])
  if type(token) == 'table' then
    return redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[2] .. ' is not a fencing counter')
  end
else
  local now_t = redis.call('time')
  local prev = redis.pcall('get', KEYS[2])
  if type(prev) == 'table' or (prev and not tonumber(prev)) then
    return redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[2] .. ' is not a fencing counter')
  end
  token = math.max(tonumber(prev or 0) + 1, tonumber(now_t[1]) * 1000000 + tonumber(now_t[2]))
  redis.call('set', KEYS[2], string.format('%.0f', token), 'px', ARGV[3])
end
redis.call('hset', KEYS[1], ARGV[1], 1)
redis.call('pexpire', KEYS[1], ARGV[2])
return {1, token}
