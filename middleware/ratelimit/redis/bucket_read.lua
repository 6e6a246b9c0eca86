-- sluice: read one bucket without changing it: the server's TIME (seconds,
-- microseconds), then the stored value of each key ('' when absent)
local time = redis.call('TIME')
local reply = {time[1], time[2]}
for i = 1, #KEYS do reply[i + 2] = redis.call('GET', KEYS[i]) or '' end
return reply
