-- sluice: the live instances of a fleet
-- KEYS[1] is a sorted set: member = an instance id, score = the Redis time in
-- ms of its last heartbeat. ARGV[1] is this instance's id, ARGV[2] the
-- heartbeat's lifetime in ms, ARGV[3] "1" to leave the fleet instead of
-- renewing. Members older than the lifetime are dropped, and so are members
-- scored in the future (written by hand, or under a clock that has since gone
-- back): they would never expire. A key of another type is replaced. The set
-- expires with its last member.
-- Reply: how many instances are alive (this one included unless it left).
local call = redis.call
local time = call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)
local ttl = tonumber(ARGV[2])
local kind = call('TYPE', KEYS[1])['ok']
if kind ~= 'zset' and kind ~= 'none' then call('DEL', KEYS[1]) end
call('ZREMRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
if ARGV[3] == '1' then
  call('ZREM', KEYS[1], ARGV[1])
else
  call('ZADD', KEYS[1], now, ARGV[1])
end
call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
local live = call('ZCARD', KEYS[1])
if live > 0 then call('PEXPIRE', KEYS[1], ttl) end
return live
