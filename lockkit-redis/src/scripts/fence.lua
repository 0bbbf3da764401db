-- Prepended to every acquire script (see script_set.rs): server time, the fencing-token rule,
-- and taking a lock hash with it.

-- Server time in ms from a TIME reply.
local function now_ms(t)
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The number of owner fields of the lock hash `key` (0 when it is absent), or nil and a
-- WRONGTYPE error reply when the key holds something else.
local function lock_fields(key)
  local n = redis.pcall('hlen', key)
  if type(n) == 'table' then
    local kind = redis.call('type', key).ok
    return nil, redis.error_reply('WRONGTYPE lockkit: key ' .. key .. ' holds a ' .. kind .. ', not a lock')
  end
  return n
end

-- The token is max(counter + 1, server time in microseconds), stored back into the counter with
-- a fresh TTL. It increases when the counter key expired, and when a failover to a replica lost
-- the counter's last updates (up to the clock skew between the two nodes), since every token ever
-- issued is at most the issuing node's time (nothing counts a million acquisitions a second).
-- Redisson's RFencedLock counter (redisson_compat, key redisson_lock_token:...) is a plain INCR
-- that never expires, as Redisson keeps it.
-- `now` is a TIME reply. Returns the token (a decimal string, or a number from INCR), or nil and a
-- WRONGTYPE error reply.
local function next_token(key, ttl, now)
  if string.sub(key, 1, 20) == 'redisson_lock_token:' then
    local token = redis.pcall('incr', key)
    if type(token) == 'table' then
      return nil, redis.error_reply('WRONGTYPE lockkit: key ' .. key .. ' is not a fencing counter')
    end
    return token
  end
  -- The time floor as text: seconds, then six digits of microseconds. Tokens are compared as
  -- decimal strings (longer is larger), so no number is parsed or formatted on the way.
  local us = now[2]
  local token = now[1] .. string.rep('0', 6 - #us) .. us
  -- Usually the floor is the token: write it and read what it replaced in one command (SET ...
  -- GET, Redis 6.2+; an older server rejects the option, and the counter is read first). A key
  -- of another type fails SET ... GET untouched.
  local prev = redis.pcall('set', key, token, 'px', ttl, 'get')
  local written = type(prev) ~= 'table'
  if not written and string.sub(prev.err, 1, 9) ~= 'WRONGTYPE' then
    prev = redis.pcall('get', key)
  end
  if type(prev) == 'table' or (prev and not string.find(prev, '^%d+$')) then
    if written then
      -- A string that is not a counter: put it back as it was (without an expiry).
      redis.call('set', key, prev)
    end
    return nil, redis.error_reply('WRONGTYPE lockkit: key ' .. key .. ' is not a fencing counter')
  end
  if prev and (#prev > #token or (#prev == #token and prev >= token)) then
    token = string.format('%.0f', tonumber(prev) + 1)
    written = false
  end
  if not written then
    redis.call('set', key, token, 'px', ttl)
  end
  return token
end

-- Takes a free lock hash for `owner` (one hold) with an expiry of `lease` ms and issues its token
-- from `fence` (see next_token). Returns the acquire scripts' {1, token}, or a WRONGTYPE error.
local function take_hash(lock, owner, lease, fence, fence_ttl, now)
  local token, fence_err = next_token(fence, fence_ttl, now)
  if not token then
    return fence_err
  end
  redis.call('hset', lock, owner, 1)
  redis.call('pexpire', lock, lease)
  return {1, token}
end
