-- Deletes one consumer, atomically: its record, the entries of its keys
-- (those that still name it), its place in the lists, and a change event.
-- KEYS[1]: the record, <base>c:<id>
-- ARGV[1]: <base>; ARGV[2]: the id
-- Returns {1, fingerprint...} (the keys it held) when there was a consumer,
-- else {0}.
local base, id = ARGV[1], ARGV[2]
local listed = redis.pcall('ZSCORE', base .. 'ids', id)
if redis.call('EXISTS', KEYS[1]) == 0 then
  if type(listed) == 'string' then redis.call('ZREM', base .. 'ids', id) end
  return {0}
end
local old = redis.pcall('HMGET', KEYS[1], 'plan', 'keys', 'org')
local changed = {}
if type(old) == 'table' and not old.err then
  if type(old[2]) == 'string' then
    for fingerprint in string.gmatch(old[2], '%S+') do
      local entry = base .. 'k:' .. fingerprint
      if redis.pcall('GET', entry) == id then redis.call('DEL', entry) end
      changed[#changed + 1] = fingerprint
    end
  end
  if type(old[1]) == 'string' then redis.pcall('ZREM', base .. 'plan:' .. old[1], id) end
  if type(old[3]) == 'string' and old[3] ~= '' then
    redis.pcall('ZREM', base .. 'org:' .. old[3], id)
  end
end
redis.pcall('ZREM', base .. 'ids', id)
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', base .. 'changes', id .. ' ' .. table.concat(changed, ' '))
local reply = {1}
for _, fingerprint in ipairs(changed) do reply[#reply + 1] = fingerprint end
return reply
