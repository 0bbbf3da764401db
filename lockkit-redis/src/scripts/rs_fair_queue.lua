-- Prepended to the scripts that touch Redisson's fair-lock queue (redisson_compat): RFairLock's
-- list `redisson_lock_queue:{name}` of waiting owners, first in line first, and its sorted set
-- `redisson_lock_timeout:{name}` of each waiter's deadline (client ms, as Redisson's clients
-- send it). lockkit's fair waiters queue there too, so the two libraries' waiters are served in
-- one order, and each is woken by '0' on `<lock channel>:<owner>`.

-- Drops the waiters at the front whose deadline passed (they stopped waiting or died), as
-- Redisson does; the others keep theirs.
local function drop_stale(queue, timeouts, now)
  while true do
    local first = redis.call('lindex', queue, 0)
    if not first then
      return
    end
    local deadline = redis.call('zscore', timeouts, first)
    if deadline and tonumber(deadline) > now then
      return
    end
    redis.call('zrem', timeouts, first)
    redis.call('lpop', queue)
  end
end

-- After a release: wakes the first fair waiter if there is one; otherwise (or unless `fair_only`)
-- also sends Redisson's '0' on the lock's channel, which wakes one waiter of each client.
local function wake_next(queue, channel, fair_only)
  local first = redis.call('lindex', queue, 0)
  if first then
    redis.call('publish', channel .. ':' .. first, '0')
  end
  if not (first and fair_only) then
    redis.call('publish', channel, '0')
  end
end
