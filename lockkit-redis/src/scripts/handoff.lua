-- Prepended (after fence.lua) to the native mutex scripts: the waiter queue and the hand-off.
-- The queue (a list) holds waiting owners in arrival order; the waiters hash maps each one to
-- '<heartbeat deadline, server ms> <grant ms>', the grant being how long a lock handed to it
-- lasts until it takes it up (its lease or its heartbeat timeout, whichever is shorter: the
-- waiter's own, so its guard and the server agree whoever hands the lock over). A waiter
-- refreshes its deadline while it waits; one whose deadline passed has stopped (its process
-- died) and is dropped when it reaches the front. A live waiter is never dropped, however long
-- it waits.

-- The queue keys expire when no waiter refreshes them. A waiter's deadline is at most a
-- heartbeat timeout ahead, so keys kept 1.5 to 2 timeouts ahead outlive every live waiter; the
-- expiry is set only when less than 1.5 are left (reading it costs a fraction of setting it).
local function keep_queue(queue, waiters, timeout)
  if redis.call('pttl', queue) < timeout * 1.5 then
    redis.call('pexpire', queue, timeout * 2)
  end
  if redis.call('pttl', waiters) < timeout * 1.5 then
    redis.call('pexpire', waiters, timeout * 2)
  end
end

-- The first live waiter (nil when none), dropping dead ones; it stays in the queue.
local function first_waiter(queue, waiters, now)
  local first = redis.call('lindex', queue, 0)
  while first do
    local entry = redis.call('hget', waiters, first)
    if entry and tonumber(string.match(entry, '^%d+')) >= now then
      return first
    end
    redis.call('lpop', queue)
    redis.call('hdel', waiters, first)
    first = redis.call('lindex', queue, 0)
  end
  return nil
end

-- Hands a free lock to the first live waiter: the waiter becomes the owner at once, with a fresh
-- token and the expiry of its grant (it extends that once it holds the guard; a waiter that died
-- meanwhile so blocks the lock for its grant at most), and
-- learns of it from '<owner> <token>' on its client's channel, '<lock key>:<client-uuid>'.
-- `t` is a TIME reply or nil. Returns the new owner or nil (no live waiter), or nil and an
-- error reply.
local function hand_off(lock, fence, queue, waiters, fence_ttl, t)
  local first = redis.call('lpop', queue)
  if not first then
    return nil
  end
  t = t or redis.call('time')
  local now = now_ms(t)
  local entry = redis.call('hget', waiters, first)
  -- Waiters that died are dropped on the way.
  while not (entry and tonumber(string.match(entry, '^%d+')) >= now) do
    redis.call('hdel', waiters, first)
    first = redis.call('lpop', queue)
    if not first then
      return nil
    end
    entry = redis.call('hget', waiters, first)
  end
  local token, fence_err = next_token(fence, fence_ttl, t)
  if not token then
    -- The waiter keeps its place; its own attempt reports the counter.
    redis.call('lpush', queue, first)
    return nil, fence_err
  end
  redis.call('hdel', waiters, first)
  redis.call('hset', lock, first, 1)
  -- An entry without a grant (an older lockkit's) gets the default lease: longer is safe.
  redis.call('pexpire', lock, tonumber(string.match(entry, ' (%d+)$')) or 30000)
  redis.call('publish', lock .. ':' .. string.match(first, '^(.*):'), first .. ' ' .. token)
  return first
end
