-- Admin: release a native mutex whoever holds it and hand it to the first live waiter.
-- KEYS[1] lock hash, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] waiters
-- ARGV[1] fencing counter TTL ms, ARGV[2] holders' channel prefix (tell_holders.lua)
-- For an election (its leader is demoted) also KEYS[5] leader hash, KEYS[6] election channel.
-- Returns 1 when it was held, 0 when free.
local kind = redis.call('type', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE lockkit: key ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a lock')
end
if KEYS[5] then
  local ok, err = leader_key_ok(KEYS[5])
  if not ok then
    return err
  end
end
tell_holders(ARGV[2], KEYS[1], kind)
redis.call('del', KEYS[1])
if KEYS[5] and redis.call('del', KEYS[5]) == 1 then
  redis.call('publish', KEYS[6], '!')
end
hand_off(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1])
return kind == 'hash' and 1 or 0
