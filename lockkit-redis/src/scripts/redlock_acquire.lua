-- Redlock: take the lock on this master (one of N independent ones) and issue its token.
-- KEYS[1] lock (a string holding the owner), KEYS[2] fencing counter, KEYS[3] waiting mark
-- ARGV[1] owner, ARGV[2] expiry ms, ARGV[3] fencing counter TTL ms, ARGV[4] round: 'try' (an
-- acquire that may not wait), 'new' (the first round of one that may), 'wait' (a later round),
-- ARGV[5] waiting mark TTL ms
-- Returns the token as a decimal string, '0' when another owner holds the lock here (or, for a
-- 'new' round, when others wait for it), or a WRONGTYPE error when the lock or the counter
-- holds something that is not ours to read.
-- The waiting mark is a courtesy among lockkit clients, which no other Redlock client sees: a
-- round that finds the lock busy and may wait marks that someone waits (for a few pauses), and
-- a first round that finds the lock free but marked queues up behind them instead of taking it,
-- so that a holder that releases and acquires again does not take the lock back every time
-- before the waiters' next try.
-- The owner is unique per acquire: finding it already here (an earlier try of the same acquire
-- whose reply was lost) takes the lock again, so 'busy' always means another owner.
local function foreign(key, what)
  return redis.error_reply('WRONGTYPE lockkit: key ' .. key .. ' is not ' .. what)
end
local cur = redis.pcall('get', KEYS[1])
if type(cur) == 'table' and cur.err then
  return foreign(KEYS[1], 'a Redlock lock')
end
if cur and cur ~= ARGV[1] then
  if ARGV[4] ~= 'try' then
    redis.call('set', KEYS[3], '1', 'px', ARGV[5])
  end
  return '0'
end
if not cur and ARGV[4] == 'new' and redis.call('exists', KEYS[3]) == 1 then
  redis.call('set', KEYS[3], '1', 'px', ARGV[5])
  return '0'
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
local t = redis.call('time')
local token = t[1] .. '000000'
if prev and (#prev > #token or (#prev == #token and prev >= token)) then
  token = string.format('%.0f', tonumber(prev) + 1)
end
redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
redis.call('set', KEYS[2], token, 'px', ARGV[3])
return token
