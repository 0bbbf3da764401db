-- One client's heartbeat for all its queued waiters of one native mutex: one call per client
-- per lock per heartbeat, however many waiters it has (each used to send its own).
-- KEYS[1] lock hash, KEYS[2] queue, KEYS[3] waiters
-- ARGV[1] heartbeat timeout ms, ARGV[2..] the client's waiting owners
-- Refreshes each owner's heartbeat deadline (keeping its grant) and the queue keys' expiry.
-- Returns {pttl of the lock (-2: free), then per owner 0 (refreshed), 1 (it owns the lock: a
-- hand-off whose message it has not seen) or 2 (not queued: dropped as dead, or never queued;
-- its own attempt queues it again)}.
local held, err = lock_fields(KEYS[1])
if not held then
  return err
end
local now = now_ms(redis.call('time'))
local timeout = tonumber(ARGV[1])
local deadline = string.format('%.0f', now + timeout)
local out = {held > 0 and redis.call('pttl', KEYS[1]) or -2}
local refreshed = false
for i = 2, #ARGV do
  local owner = ARGV[i]
  local status = 2
  if held > 0 and redis.call('hexists', KEYS[1], owner) == 1 then
    status = 1
  else
    local entry = redis.call('hget', KEYS[3], owner)
    -- Present is enough: a live waiter whose deadline passed while its beat was late is
    -- revived, as its own attempt would.
    if entry then
      redis.call('hset', KEYS[3], owner, deadline .. ' ' .. (string.match(entry, ' (%d+)$') or '30000'))
      status = 0
      refreshed = true
    end
  end
  out[#out + 1] = status
end
if refreshed then
  keep_queue(KEYS[2], KEYS[3], timeout)
end
return out
