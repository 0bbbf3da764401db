-- Acquire a mutex at once for a fresh owner and issue its fencing token, as Redisson's RLock /
-- RFencedLock do: take the lock hash if it is absent; never queue. The mutex acquire in
-- Redisson's layout (redisson_compat), and natively an acquire that does not wait and is not
-- fair (it needs no queue keys).
-- KEYS[1] lock hash (owner field -> hold count), KEYS[2] fencing counter
-- ARGV[1] owner field, ARGV[2] lease in ms, ARGV[3] fencing counter TTL in ms
-- Returns {1, token} when acquired, {0, pttl of the holder} when busy.
local held, err = lock_fields(KEYS[1])
if not held then
  return err
end
if held > 0 and redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return {0, redis.call('pttl', KEYS[1])}
end
-- Free, or ours already: a resent request (redis-rs resends after a dropped connection) whose
-- first run took the lock takes it up again, with a new token (the first one was never seen).
return take_hash(KEYS[1], ARGV[1], ARGV[2], KEYS[2], ARGV[3], redis.call('time'))
