-- An elected leader changes its value, only while it still leads.
-- KEYS[1] lock hash, KEYS[2] leader hash, KEYS[3] election channel
-- ARGV[1] owner, ARGV[2] the new value
-- Returns 1 when proclaimed, 0 when the owner no longer leads.
if redis.call('type', KEYS[1]).ok ~= 'hash' or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if redis.call('type', KEYS[2]).ok ~= 'hash' or redis.call('hget', KEYS[2], 'owner') ~= ARGV[1] then
  return 0
end
redis.call('hset', KEYS[2], 'value', ARGV[2])
redis.call('publish', KEYS[3], '!')
return 1
