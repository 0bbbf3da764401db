-- Prepended to the force-unlock scripts: tells each holder it names that its ownership of `key`
-- was taken, with '<owner> <key>' on its client's channel '<ARGV channel prefix><client-uuid>',
-- so its client checks it at once instead of at its next renewal. An owner is
-- '<client-uuid>:<n>' (a Redisson writer's has ':write' after it); nobody listens on a Redisson
-- client's channel, and a message nobody hears costs nothing more. The message is a courtesy:
-- no channel prefix (an older caller), or a PUBLISH refused (an ACL without the channel), and
-- the force-unlock goes on untold.
local function tell_holder(channels, owner, key)
  if not channels or channels == '' then
    return
  end
  local client = string.match(owner, '^([^:]+):')
  if client then
    redis.pcall('publish', channels .. client, owner .. ' ' .. key)
  end
end

-- Tells every field of hash `key` (but Redisson's 'mode'), or every member of sorted set `key`.
local function tell_holders(channels, key, kind)
  local owners
  if kind == 'hash' then
    owners = redis.call('hkeys', key)
  elseif kind == 'zset' then
    owners = redis.call('zrange', key, 0, -1)
  else
    return
  end
  for _, owner in ipairs(owners) do
    if owner ~= 'mode' then
      tell_holder(channels, owner, key)
    end
  end
end
