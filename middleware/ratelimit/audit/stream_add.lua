-- sluice: append denials to the audit stream, capped at exactly max_len entries
-- KEYS[1]: the stream. ARGV[1]: max_len; then six values per denial: route,
-- limit, consumer, plan, retry_after_ms, instance. Each entry's id is Redis'
-- time of the append. Reply: how many entries were appended.
local max_len, n = ARGV[1], 0
for at = 2, #ARGV, 6 do
  redis.call('XADD', KEYS[1], 'MAXLEN', max_len, '*', 'route', ARGV[at], 'limit', ARGV[at + 1],
             'consumer', ARGV[at + 2], 'plan', ARGV[at + 3], 'retry_after_ms', ARGV[at + 4],
             'instance', ARGV[at + 5])
  n = n + 1
end
return n
