-- Prepended (after typed.lua) to every acquire script (see script_set.rs): server time, the
-- fencing-token rule, and taking a lock hash with it.

-- Server time in ms from a TIME reply.
local function now_ms(t)
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The number of owner fields of the lock hash `key` (0 when it is absent), or nil and an error
-- reply: WRONGTYPE when the key holds something else, or HLEN's own error (see typed_call).
local function lock_fields(key)
  local ok, n = typed_call('hlen', key)
  if not ok then
    if n then
      return nil, n
    end
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
-- `now` is a TIME reply. Returns the token (a decimal string, or a number from INCR), or nil and
-- an error reply: WRONGTYPE when the key is not a counter, or a command's own error (READONLY,
-- NOPERM, OOM: see typed_call).
local function next_token(key, ttl, now)
  local function foreign()
    return nil, redis.error_reply('WRONGTYPE lockkit: key ' .. key .. ' is not a fencing counter')
  end
  if string.sub(key, 1, 20) == 'redisson_lock_token:' then
    local ok, token = typed_call('incr', key)
    if ok then
      return token
    end
    -- A string that is not a number is no counter either.
    if not token or string.find(token.err, 'not an integer', 1, true) then
      return foreign()
    end
    return nil, token
  end
  -- The time floor as text: seconds, then six digits of microseconds. Tokens are compared as
  -- decimal strings (longer is larger), so no number is parsed or formatted on the way.
  local us = now[2]
  local token = now[1] .. string.rep('0', 6 - #us) .. us
  -- Usually the floor is the token: write it and read what it replaced in one command (SET ...
  -- GET, Redis 6.2+; an older server rejects the option with a syntax error, and the counter is
  -- read first). A key of another type fails SET ... GET untouched.
  local prev = redis.pcall('set', key, token, 'px', ttl, 'get')
  local written = not (type(prev) == 'table' and prev.err)
  if not written then
    if string.find(prev.err, '^WRONGTYPE') then
      return foreign()
    end
    if not string.find(prev.err, 'syntax error', 1, true) then
      return nil, prev
    end
    local ok
    ok, prev = typed_call('get', key)
    if not ok then
      if prev then
        return nil, prev
      end
      return foreign()
    end
  end
  if prev and not string.find(prev, '^%d+$') then
    if written then
      -- A string that is not a counter: put it back as it was (without an expiry).
      redis.call('set', key, prev)
    end
    return foreign()
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
-- from `fence` (see next_token). Returns the acquire scripts' {1, token}, or an error reply.
local function take_hash(lock, owner, lease, fence, fence_ttl, now)
  local token, fence_err = next_token(fence, fence_ttl, now)
  if not token then
    return fence_err
  end
  redis.call('hset', lock, owner, 1)
  redis.call('pexpire', lock, lease)
  return {1, token}
end
