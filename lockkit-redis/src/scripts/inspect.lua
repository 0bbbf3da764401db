-- Read one native lock, read-write lock or semaphore for operators, in one atomic snapshot.
-- KEYS[1] lock hash (the writer's, for RW locks), KEYS[2] shared holders zset, KEYS[3] waiters
-- (the mutex queue list, or the RW lock's waiting writers zset), KEYS[4] fencing counter,
-- KEYS[5] the native mutex waiters' heartbeats (hash owner -> '<deadline ms> <grant ms>'; any
-- other type: no heartbeats to check)
-- Returns {pttl of the hash (-2 when absent), counter value or '', {owner fields of the hash},
-- {live shared member, ms left, ...}, {live waiters: the queue in order, the waiting writers by
-- deadline}}.
local function typed(key, want)
  local t = redis.call('type', key).ok
  if t ~= 'none' and t ~= want then
    return redis.error_reply('WRONGTYPE lockkit: key ' .. key .. ' holds a ' .. t .. ', not a lock')
  end
  return t == want
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local has_hash = typed(KEYS[1], 'hash')
if type(has_hash) == 'table' then return has_hash end
local has_set = typed(KEYS[2], 'zset')
if type(has_set) == 'table' then return has_set end
local fields, shared, waiters = {}, {}, {}
local pttl = -2
if has_hash then
  pttl = redis.call('pttl', KEYS[1])
  fields = redis.call('hkeys', KEYS[1])
end
if has_set then
  local all = redis.call('zrangebyscore', KEYS[2], '(' .. now, '+inf', 'withscores')
  for i = 1, #all, 2 do
    shared[#shared + 1] = all[i]
    shared[#shared + 1] = tostring(math.floor(tonumber(all[i + 1]) - now))
  end
end
local wt = redis.call('type', KEYS[3]).ok
if wt == 'list' then
  local beats = redis.call('type', KEYS[5]).ok == 'hash'
  for _, w in ipairs(redis.call('lrange', KEYS[3], 0, -1)) do
    local entry = beats and redis.call('hget', KEYS[5], w)
    -- A queued waiter whose heartbeat ran out is gone (the next hand-off drops it).
    if not beats or (entry and tonumber(string.match(entry, '^%d+') or 0) >= now) then
      waiters[#waiters + 1] = w
    end
  end
elseif wt == 'zset' then
  waiters = redis.call('zrangebyscore', KEYS[3], '(' .. now, '+inf')
end
-- A counter of another type is shown as none; a failed read is an error.
local ok, fence = typed_call('get', KEYS[4])
if not ok and fence then return fence end
if type(fence) ~= 'string' then fence = '' end
return {pttl, fence, fields, shared, waiters}
