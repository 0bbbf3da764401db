-- Redlock: release the lock on this master if ARGV[1] holds it (as every Redlock client does),
-- and tell the first lockkit waiter that the lock is free (see redlock_acquire.lua).
-- KEYS[1] lock, KEYS[2] waiters, KEYS[3] their deadlines, KEYS[4] the release latch of this
-- owner; ARGV[1] owner, ARGV[2] the lock's channel, ARGV[3] the id of a waiter that leaves (its
-- place goes with it) or '', ARGV[4] '1' to tell the first waiter when the lock is free here,
-- '0' when the sender knows that someone else holds it on a quorum (a word would only send the
-- waiter on a round that fails), ARGV[5] the latch's TTL in ms.
-- Returns 1 when deleted (now, or by an earlier run of this release: the latch says so, since a
-- release whose reply was lost is sent again), 0 when not ours (or absent).
local released = 0
if redis.pcall('get', KEYS[1]) == ARGV[1] then
  released = redis.call('del', KEYS[1])
  if released == 1 then
    redis.call('set', KEYS[4], '1', 'px', ARGV[5])
  end
elseif redis.call('exists', KEYS[4]) == 1 then
  released = 1
end
local function zset(key)
  local kind = redis.call('type', key).ok
  return kind == 'zset'
end
if redis.call('exists', KEYS[2]) == 1 and zset(KEYS[2]) and zset(KEYS[3]) then
  if ARGV[3] ~= '' then
    redis.call('zrem', KEYS[2], ARGV[3])
    redis.call('zrem', KEYS[3], ARGV[3])
  end
  if ARGV[4] == '1' and redis.call('exists', KEYS[1]) == 0 then
    -- The first waiter whose place has not lapsed (lapsed places are dropped).
    local t = redis.call('time')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local lapsed = redis.call('zrangebyscore', KEYS[3], '-inf', now)
    for i = 1, #lapsed, 1000 do
      redis.call('zrem', KEYS[2], unpack(lapsed, i, math.min(i + 999, #lapsed)))
    end
    redis.call('zremrangebyscore', KEYS[3], '-inf', now)
    local first = redis.call('zrange', KEYS[2], 0, 0)[1]
    if first then
      redis.call('publish', ARGV[2], first)
    end
  end
end
return released
