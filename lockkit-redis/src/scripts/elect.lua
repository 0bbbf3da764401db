-- Prepended (after handoff.lua) to the native mutex's acquire, release and leave (see
-- script_set.rs). An election is a native mutex whose owner leads once it has taken the lock up
-- itself; its leader hash (`<lock>:leader`: owner, term, value) is written in the same script
-- that grants the lock, expires with the lock, and every change of it is announced with `!` on
-- the election's channel. The scripts pass the leader hash and the channel only for elections.

-- Whether `leader` may be written: absent, or a hash (else the WRONGTYPE error reply).
local function leader_key_ok(leader)
  local kind = redis.call('type', leader).ok
  if kind ~= 'none' and kind ~= 'hash' then
    return false, redis.error_reply('WRONGTYPE lockkit: key ' .. leader .. ' holds a ' .. kind .. ', not a leader')
  end
  return true
end

-- Records `owner` as the leader in `term` with `value`, expiring with its lease of `ms`.
local function lead(leader, channel, owner, term, value, ms)
  redis.call('del', leader)
  redis.call('hset', leader, 'owner', owner, 'term', term, 'value', value)
  redis.call('pexpire', leader, ms)
  redis.call('publish', channel, '!')
end

-- Clears the leader hash if `owner` leads (it released, resigned or left).
local function unlead(leader, channel, owner)
  if redis.call('type', leader).ok == 'hash' and redis.call('hget', leader, 'owner') == owner then
    redis.call('del', leader)
    redis.call('publish', channel, '!')
  end
end
