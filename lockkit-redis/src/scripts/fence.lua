-- Prepended to every acquire script (see script_set.rs): the fencing-token rule.
-- The token is max(counter + 1, server time in microseconds), stored back into the counter with
-- a fresh TTL. It increases when the counter key expired, and when a failover to a replica lost
-- the counter's last updates (up to the clock skew between the two nodes), since every token ever
-- issued is at most the issuing node's time (nothing counts a million acquisitions a second).
-- Redisson's RFencedLock counter (redisson_compat, key redisson_lock_token:...) is a plain INCR
-- that never expires, as Redisson keeps it.
-- `now` is a TIME reply. Returns the token, or nil and a WRONGTYPE error reply.
local function next_token(key, ttl, now)
  if string.sub(key, 1, 20) == 'redisson_lock_token:' then
    local token = redis.pcall('incr', key)
    if type(token) == 'table' then
      return nil, redis.error_reply('WRONGTYPE lockkit: key ' .. key .. ' is not a fencing counter')
    end
    return token
  end
  local prev = redis.pcall('get', key)
  if type(prev) == 'table' or (prev and not tonumber(prev)) then
    return nil, redis.error_reply('WRONGTYPE lockkit: key ' .. key .. ' is not a fencing counter')
  end
  local token = math.max(tonumber(prev or 0) + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))
  redis.call('set', key, string.format('%.0f', token), 'px', ttl)
  return token
end
