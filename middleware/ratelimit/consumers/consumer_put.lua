-- Creates or replaces one consumer, atomically: its record, the entry of
-- each of its keys, its place in the lists, and a change event.
-- KEYS[1]: the record, <base>c:<id>
-- ARGV[1]: <base>; ARGV[2]: the id; ARGV[3]: the document (canonical JSON,
--          so that an unchanged consumer is recognised); ARGV[4]: the plan;
-- ARGV[5]: its organisation ('' for none); ARGV[6..]: the fingerprints of its keys.
-- Returns {'conflict', n} when the n-th key is held by another consumer
-- (nothing is written); {'unchanged', updated_at} when the document is the
-- one stored (nothing is written, no event); else {'created' | 'replaced',
-- updated_at, fingerprint...} with every key whose entry changed (the old
-- keys and the new). Every check comes before the first write.
local base, id, doc, plan, org = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local first_key = 6
for i = first_key, #ARGV do
  local owner = redis.pcall('GET', base .. 'k:' .. ARGV[i])
  if type(owner) == 'string' and owner ~= id then return {'conflict', i - first_key + 1} end
end
local old = redis.pcall('HMGET', KEYS[1], 'doc', 'plan', 'keys', 'updated_at', 'org')
if type(old) ~= 'table' or old.err then
  old = {}  -- a record of another type: replaced whole
end
if old[1] == doc and old[4] then return {'unchanged', old[4]} end

local wanted = {}
for i = first_key, #ARGV do wanted[ARGV[i]] = true end
local changed = {}
if type(old[3]) == 'string' then
  for fingerprint in string.gmatch(old[3], '%S+') do
    if not wanted[fingerprint] then
      local entry = base .. 'k:' .. fingerprint
      if redis.pcall('GET', entry) == id then redis.call('DEL', entry) end
      changed[#changed + 1] = fingerprint
    end
  end
end
local keys = {}
for i = first_key, #ARGV do
  redis.call('SET', base .. 'k:' .. ARGV[i], id)
  keys[#keys + 1] = ARGV[i]
  changed[#changed + 1] = ARGV[i]
end
if type(old[2]) == 'string' and old[2] ~= plan then
  redis.pcall('ZREM', base .. 'plan:' .. old[2], id)
end
if type(old[5]) == 'string' and old[5] ~= '' and old[5] ~= org then
  redis.pcall('ZREM', base .. 'org:' .. old[5], id)
end
redis.call('DEL', KEYS[1])
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('HSET', KEYS[1], 'doc', doc, 'plan', plan, 'keys', table.concat(keys, ' '),
           'updated_at', now, 'org', org)
redis.pcall('ZADD', base .. 'plan:' .. plan, 0, id)
if org ~= '' then redis.pcall('ZADD', base .. 'org:' .. org, 0, id) end
redis.pcall('ZADD', base .. 'ids', 0, id)
redis.call('PUBLISH', base .. 'changes', id .. ' ' .. table.concat(changed, ' '))
local reply = {'created', now}
if old[1] then reply[1] = 'replaced' end
for _, fingerprint in ipairs(changed) do reply[#reply + 1] = fingerprint end
return reply
