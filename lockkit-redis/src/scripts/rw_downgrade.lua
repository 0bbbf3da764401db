-- Turn a held write lock into a read lock atomically: no writer can come in between.
-- KEYS[1] write hash, KEYS[2] readers zset; ARGV[1] owner, ARGV[2] lease ms, ARGV[3] channel
local removed, err = hdel_ours(KEYS[1], ARGV[1])
if err then
  return err
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if removed ~= 1 then
  -- A resend of a downgrade that was applied finds our read hold in place of the write hold.
  local score = redis.call('zscore', KEYS[2], ARGV[1])
  if score and tonumber(score) > now then
    return 1
  end
  return 0
end
redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
if redis.call('pttl', KEYS[2]) < tonumber(ARGV[2]) then
  redis.call('pexpire', KEYS[2], ARGV[2])
end
-- Waiting readers may join now.
redis.call('publish', ARGV[3], '0')
return 1
