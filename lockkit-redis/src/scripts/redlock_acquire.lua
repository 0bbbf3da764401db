-- Redlock: take the lock on this master (one of N independent ones) and issue its token.
-- KEYS[1] lock (a string holding the owner), KEYS[2] fencing counter, KEYS[3] waiters (sorted
-- set: id by the ms it began waiting), KEYS[4] their deadlines (sorted set: id by server ms)
-- ARGV[1] owner, ARGV[2] expiry ms, ARGV[3] fencing counter TTL ms, ARGV[4] 'try' (an acquire
-- that may not wait) or 'wait' (a round of one that may), ARGV[5] how long a waiter's place
-- lasts after its last round (ms), ARGV[6] when the waiter began waiting (ms since the epoch, by
-- the masters' clocks; '' in its first round, which takes no place), ARGV[7] its id
-- Returns the token as a decimal string; '0 <server ms>' when another owner holds the lock here
-- (or, for a waiting round, when an earlier waiter is first); or a WRONGTYPE error when the
-- lock or the counter holds something that is not ours to read.
-- The owner is unique per round: finding it already here (a resend of the same round whose
-- reply was lost) takes the lock again, so 'busy' always means another owner.
-- The waiters are a courtesy among lockkit clients that no other Redlock client sees: a waiting
-- round takes its place (ordered by when it began waiting, then by id: the same order on every
-- master), a round that finds the lock free while another waiter is first gives way, and a
-- release tells the first waiter on the lock's channel (see redlock_release.lua). So a holder
-- that releases and acquires again queues behind the others, and the next one comes at once
-- instead of at its next try. A waiter that stops asking is dropped once its place lapses.
local function foreign(key, what)
  return redis.error_reply('WRONGTYPE lockkit: key ' .. key .. ' is not ' .. what)
end
local cur = redis.pcall('get', KEYS[1])
if type(cur) == 'table' and cur.err then
  return foreign(KEYS[1], 'a Redlock lock')
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local busy = '0 ' .. string.format('%.0f', now)
-- A waiting round, unless a foreign value sits where the waiters live (then no courtesy, as
-- for other Redlock clients).
local waits = ARGV[4] == 'wait'
if waits and redis.call('exists', KEYS[3], KEYS[4]) > 0 then
  for i = 3, 4 do
    local kind = redis.call('type', KEYS[i]).ok
    if kind ~= 'zset' and kind ~= 'none' then
      waits = false
    end
  end
end
-- Whether lockkit waiters wait here (their places lapsed are dropped first).
local queued = false
if waits and redis.call('exists', KEYS[3]) == 1 then
  local lapsed = redis.call('zrangebyscore', KEYS[4], '-inf', now)
  for i = 1, #lapsed, 1000 do
    redis.call('zrem', KEYS[3], unpack(lapsed, i, math.min(i + 999, #lapsed)))
  end
  redis.call('zremrangebyscore', KEYS[4], '-inf', now)
  queued = redis.call('exists', KEYS[3]) == 1
end
-- Takes (or keeps) this waiter's place once it knows when it began, and says whether another
-- waiter is first.
local function behind_another()
  if ARGV[6] == '' then
    return queued
  end
  redis.call('zadd', KEYS[3], 'NX', ARGV[6], ARGV[7])
  redis.call('zadd', KEYS[4], now + tonumber(ARGV[5]), ARGV[7])
  redis.call('pexpire', KEYS[3], ARGV[5])
  redis.call('pexpire', KEYS[4], ARGV[5])
  return redis.call('zrange', KEYS[3], 0, 0)[1] ~= ARGV[7]
end
if cur and cur ~= ARGV[1] then
  if waits then
    behind_another()
  end
  return busy
end
-- (A resend that finds its own key took the lock already: it does not give way.)
if not cur and queued and behind_another() then
  return busy
end
-- A counter is a decimal number without a leading zero that a double holds exactly (below
-- 2^53, at most 16 digits), so that adding one is exact.
local prev = redis.pcall('get', KEYS[2])
if (type(prev) == 'table' and prev.err) or (prev and (not string.find(prev, '^[1-9]%d*$')
    or #prev > 16 or tonumber(prev) >= 9007199254740991)) then
  return foreign(KEYS[2], 'a fencing counter')
end
-- The token is max(counter + 1, server time in whole seconds, in microseconds). Masters whose
-- counters agree issue the same token, so an uncontended acquire needs no second round; the
-- floor keeps tokens increasing after the counter expired (see the module docs of redlock.rs).
local token = t[1] .. '000000'
if prev and (#prev > #token or (#prev == #token and prev >= token)) then
  token = string.format('%.0f', tonumber(prev) + 1)
end
redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
redis.call('set', KEYS[2], token, 'px', ARGV[3])
if queued then
  redis.call('zrem', KEYS[3], ARGV[7])
  redis.call('zrem', KEYS[4], ARGV[7])
end
return token
