-- Reads one consumer's record (the admin API's GET).
-- KEYS[1]: the record, <base>c:<id>
-- Returns false when there is none; else {doc, updated_at}, or {'damaged'}
-- for a record of the wrong type or with a field missing.
local record = redis.pcall('HMGET', KEYS[1], 'doc', 'updated_at')
if type(record) ~= 'table' or record.err then return {'damaged'} end
if not record[1] and not record[2] then return false end
if not record[1] or not record[2] then return {'damaged'} end
return {record[1], record[2]}
