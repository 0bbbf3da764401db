-- Acquire a native mutex for a fresh owner, or take up a hand-off, and issue its fencing token.
-- KEYS[1] lock hash, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] waiters
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] fencing counter TTL ms, ARGV[4] the attempt: '0' for
-- an acquire that does not wait, '1' for the first attempt of one that does (queue when busy),
-- '2' for its later attempts (refresh the heartbeat, take up a hand-off); with an 'f' after it
-- for a fair acquire (never ahead of a live waiter), ARGV[5] heartbeat timeout ms (also how
-- long a hand-off lasts until it is taken up)
-- For an election (see elect.lua) also KEYS[5] leader hash, KEYS[6] election channel, ARGV[6]
-- the candidate's value: taking the lock makes it the leader.
-- Returns {1, token} when acquired, {0, pttl} when busy (the holder's remaining lease; -1: none).
local held, err = lock_fields(KEYS[1])
if not held then
  return err
end
if KEYS[5] then
  local ok, bad = leader_key_ok(KEYS[5])
  if not ok then
    return bad
  end
end
local owner = ARGV[1]
local mode = string.sub(ARGV[4], 1, 1)
local fair = #ARGV[4] == 2

-- Takes the lock for us; a waiting acquire also leaves the queue (a resent first attempt may
-- have queued us in its first run), so no entry of ours is ever left to be handed the lock.
local function take(t)
  if mode ~= '0' and redis.call('hdel', KEYS[4], owner) == 1 then
    redis.call('lrem', KEYS[3], 1, owner)
  end
  local r = take_hash(KEYS[1], owner, ARGV[2], KEYS[2], ARGV[3], t)
  if KEYS[5] and r[1] == 1 then
    lead(KEYS[5], KEYS[6], owner, r[2], ARGV[6], ARGV[2])
  end
  return r
end

if held == 0 and mode ~= '2' and not fair then
  -- Free, and a newcomer that is not fair: it may go ahead of any waiters.
  return take(redis.call('time'))
end

local function enqueue(now)
  -- A later attempt finds its place unless it was dropped as dead (it was stopped for longer
  -- than the heartbeat timeout): then it queues again, at the back. A resent first attempt
  -- finds its place too: an owner is never queued twice.
  if redis.call('hexists', KEYS[4], owner) == 0 then
    redis.call('rpush', KEYS[3], owner)
  end
  local timeout = tonumber(ARGV[5])
  -- A hand-off to us lasts our lease or our heartbeat timeout, whichever is shorter: the
  -- expiry our guard counts on, whatever the releaser's settings.
  local grant = math.min(tonumber(ARGV[2]), timeout)
  redis.call('hset', KEYS[4], owner, string.format('%.0f', now + timeout) .. ' ' .. string.format('%.0f', grant))
  keep_queue(KEYS[3], KEYS[4], timeout)
end

if held > 0 then
  if redis.call('hexists', KEYS[1], owner) == 1 then
    -- We are the owner already: a hand-off whose message has not reached us, or a resent
    -- request (redis-rs resends after a dropped connection) whose first run took the lock.
    -- Take it up with our own lease from now, and a new token (the first one was never seen).
    return take(redis.call('time'))
  end
  if mode ~= '0' then
    enqueue(now_ms(redis.call('time')))
  end
  return {0, redis.call('pttl', KEYS[1])}
end
-- Free, for a fair acquire or a queued one (which leaves the queue).
local t = redis.call('time')
local first = first_waiter(KEYS[3], KEYS[4], now_ms(t))
if first and first ~= owner and fair then
  -- Free, but a live waiter is first (its holder's lease ran out, or a hand-off lapsed): its turn.
  local _, err = hand_off(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], t)
  if err then
    return err
  end
  if mode ~= '0' then
    enqueue(now_ms(t))
  end
  return {0, redis.call('pttl', KEYS[1])}
end
return take(t)
