-- sluice: read one bucket without changing it: the server's TIME (seconds,
-- microseconds), then per key its stored value ('' when absent); a sorted set
-- (a sliding log) as 'L' and the little-endian double score of each member,
-- oldest first
local time = redis.call('TIME')
local reply = {time[1], time[2]}
for i = 1, #KEYS do
  local kind = redis.call('TYPE', KEYS[i]).ok
  if kind == 'zset' then
    local entries = redis.call('ZRANGE', KEYS[i], 0, -1, 'WITHSCORES')
    local packed = {'L'}
    for j = 2, #entries, 2 do packed[#packed + 1] = struct.pack('<d', tonumber(entries[j])) end
    reply[i + 2] = table.concat(packed)
  elseif kind == 'string' then
    reply[i + 2] = redis.call('GET', KEYS[i])
  else
    reply[i + 2] = ''
  end
end
return reply
