-- Resolves an API key's fingerprint to its consumer, in one call.
-- KEYS[1]: the key's entry, <base>k:<fingerprint>, whose value is the id of
--          the consumer holding the key
-- ARGV[1]: <base>, the prefix every key of the consumer store starts with
--          (it carries the store's hash tag: one slot holds the whole store)
-- Returns false when no consumer holds the key; else {id, doc, updated_at};
-- anything else (an entry or record of the wrong type, a record missing)
-- is a store another writer damaged, which the gateway treats as unknown.
local id = redis.pcall('GET', KEYS[1])
if not id then return false end
if type(id) ~= 'string' then return {'damaged'} end
local record = redis.pcall('HMGET', ARGV[1] .. 'c:' .. id, 'doc', 'updated_at')
if type(record) ~= 'table' or record.err or not record[1] or not record[2] then
  return {'damaged'}
end
return {id, record[1], record[2]}
