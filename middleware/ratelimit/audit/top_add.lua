-- sluice: add one worker's denial counts to the fleet's most-limited view
-- KEYS: one sorted set per (limit, 10-second slot), members the callers,
-- scores their denials in that slot. ARGV[1]: the sets' lifetime in seconds;
-- then for each key, in order: how many callers follow, and that many pairs
-- caller, count. Reply: how many counts were added.
local ttl, at, added = ARGV[1], 2, 0
for i = 1, #KEYS do
  local n = tonumber(ARGV[at])
  at = at + 1
  for _ = 1, n do
    redis.call('ZINCRBY', KEYS[i], ARGV[at + 1], ARGV[at])
    at = at + 2
    added = added + 1
  end
  redis.call('EXPIRE', KEYS[i], ttl)
end
return added
