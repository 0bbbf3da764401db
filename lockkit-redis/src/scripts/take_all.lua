-- Take several native mutexes at once for one fresh owner, all or none: a multi-lock whose
-- members share one server (a single server, or Sentinel's primary). Never queues and never
-- waits; a member that is held makes the whole set busy, and nothing is taken.
-- KEYS: per member its lock hash, then its fencing counter (KEYS[2i-1], KEYS[2i])
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] fencing counter TTL ms
-- Returns {1, token, token, ...} (one per member, in order) when every member was taken,
-- {0, i} when member i (1-based) was busy.
-- A resent request (redis-rs resends after a dropped connection or a failover) whose first run
-- took the set finds its own holds and takes them up again, with new tokens: it never answers
-- busy to itself.
local n = #KEYS / 2
-- A resent run that finds the set busy (or a key of another type) gives back what its first run
-- took, so the answer it returns leaves nothing of ours.
local function give_back(upto)
  for j = 1, upto do
    -- A key of another type answers WRONGTYPE, and stays as it is.
    redis.pcall('hdel', KEYS[2 * j - 1], ARGV[1])
  end
end
for i = 1, n do
  local held, err = lock_fields(KEYS[2 * i - 1])
  if not held then
    give_back(i - 1)
    return err
  end
  if held > 0 and redis.call('hexists', KEYS[2 * i - 1], ARGV[1]) == 0 then
    give_back(n)
    return {0, i}
  end
end
local t = redis.call('time')
local out = {1}
for i = 1, n do
  local r = take_hash(KEYS[2 * i - 1], ARGV[1], ARGV[2], KEYS[2 * i], ARGV[3], t)
  if r.err then
    -- A counter of another type (or a failing command): give back what was taken (each was
    -- free or ours), so the set stays all or none.
    for j = 1, i - 1 do
      redis.call('del', KEYS[2 * j - 1])
    end
    return r
  end
  out[i + 1] = r[2]
end
return out
