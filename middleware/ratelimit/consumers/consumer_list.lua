-- One page of consumers, in id order (the admin API's list).
-- KEYS[1]: the list, <base>ids (every consumer) or <base>plan:<plan>
-- ARGV[1]: <base>; ARGV[2]: the cursor (the last id of the previous page,
--          empty for the first); ARGV[3]: how many at most
-- Returns a flat list: id, doc, updated_at for each consumer (a damaged
-- record gives its id and two empty strings).
local base, cursor, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
local from = '-'
if cursor ~= '' then from = '(' .. cursor end
local ids = redis.pcall('ZRANGEBYLEX', KEYS[1], from, '+', 'LIMIT', 0, count)
if type(ids) ~= 'table' or ids.err then return {} end
local out = {}
for _, id in ipairs(ids) do
  local record = redis.pcall('HMGET', base .. 'c:' .. id, 'doc', 'updated_at')
  out[#out + 1] = id
  if type(record) == 'table' and not record.err and record[1] and record[2] then
    out[#out + 1] = record[1]
    out[#out + 1] = record[2]
  else
    out[#out + 1] = ''
    out[#out + 1] = ''
  end
end
return out
