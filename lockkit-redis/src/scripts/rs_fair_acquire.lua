-- Fair (FIFO) acquire in Redisson's RFairLock protocol (redisson_compat; see rs_fair_queue.lua),
-- with a fencing token: take the lock only when it is free and we are first in the queue (or it
-- is empty); otherwise queue once, behind the last waiter, with a deadline of the one before it
-- (or the holder's expiry) plus its wait, as Redisson's waiters do. A try (no wait) never
-- queues, as Redisson's tryLock() does not.
-- KEYS[1] lock hash, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] deadlines
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] fencing counter TTL ms, ARGV[4] wait ms (how long
-- the waiter keeps its place after the one before it), ARGV[5] now (client ms), ARGV[6] channel,
-- ARGV[7] '1' to queue when it cannot take the lock, '0' for a try
-- Returns {1, token} when acquired, {0, the holder's PTTL} when not (-1: no expiry, -2: free,
-- but another waiter is first).
local held, err = lock_fields(KEYS[1])
if not held then
  return err
end
local owner, wait, now = ARGV[1], tonumber(ARGV[4]), tonumber(ARGV[5])
drop_stale(KEYS[3], KEYS[4], now)
local first = redis.call('lindex', KEYS[3], 0)
local mine = held > 0 and redis.call('hexists', KEYS[1], owner) == 1
if mine or (held == 0 and (not first or first == owner)) then
  -- Ours to take (or ours already: a resent request whose first run took it). As Redisson's
  -- does, the taker leaves the queue and the waiters behind it move up by its wait.
  if first == owner then
    redis.call('lpop', KEYS[3])
  end
  if redis.call('zrem', KEYS[4], owner) == 1 or first == owner then
    for _, w in ipairs(redis.call('zrange', KEYS[4], 0, -1)) do
      redis.call('zincrby', KEYS[4], -wait, w)
    end
  end
  return take_hash(KEYS[1], owner, ARGV[2], KEYS[2], ARGV[3], redis.call('time'))
end
local pttl = redis.call('pttl', KEYS[1])
if ARGV[7] == '1' and not redis.call('zscore', KEYS[4], owner) then
  local last = redis.call('lindex', KEYS[3], -1)
  local last_deadline = last and redis.call('zscore', KEYS[4], last)
  local ahead = last_deadline and (tonumber(last_deadline) - now) or pttl
  redis.call('zadd', KEYS[4], math.max(ahead, 0) + wait + now, owner)
  redis.call('rpush', KEYS[3], owner)
end
if held == 0 then
  -- Free, but someone else is first: make sure they know.
  redis.call('publish', ARGV[6] .. ':' .. first, '0')
end
return {0, pttl}
