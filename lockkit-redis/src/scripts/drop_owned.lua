-- A fixed lease reached its local deadline: remove our hold now if the server still has it, so
-- the server agrees with the guard (which turns Lost next). Owner-checked; never re-creates.
-- KEYS[1] lock hash or holders zset; ARGV[1] owner field or member, ARGV[2] 'h' or 's'
if ARGV[2] == 'h' then
  redis.pcall('hdel', KEYS[1], ARGV[1])
else
  redis.pcall('zrem', KEYS[1], ARGV[1])
end
return 1
