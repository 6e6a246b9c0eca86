-- sluice: the callers with the most denials of one limit over some slots
-- KEYS[1]: a scratch key (in the same hash slot as the others), then the
-- limit's sorted sets of the slots the window covers. ARGV[1]: how many
-- callers to answer. Reply: caller, denials, ... most denials first (ties in
-- caller order).
local scratch = KEYS[1]
local sets = {}
for i = 2, #KEYS do sets[#sets + 1] = KEYS[i] end
redis.call('ZUNIONSTORE', scratch, #sets, unpack(sets))
local top = redis.call('ZRANGE', scratch, 0, tonumber(ARGV[1]) - 1, 'REV', 'WITHSCORES')
redis.call('DEL', scratch)
return top
