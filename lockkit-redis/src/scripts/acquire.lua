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
-- Fencing token: next_token (fence.lua).
local token, fence_err = next_token(KEYS[2], ARGV[3], redis.call('time'))
if not token then
  return fence_err
end
redis.call('hset', KEYS[1], ARGV[1], 1)
redis.call('pexpire', KEYS[1], ARGV[2])
return {1, token}
