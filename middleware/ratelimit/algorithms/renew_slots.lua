-- sluice: renew the leases of concurrency slots this instance holds
-- ARGV[1] holds per key two little-endian doubles: the slot (its member, as a
-- whole number) and its lease in ms. A slot still in its set gets a lease
-- from now, and its key a second more; a slot already gone (its lease ended:
-- the fleet may have handed its place to another request) stays gone.
-- Reply: how many slots were renewed.
local call, unpack_d, nums = redis.call, struct.unpack, ARGV[1]
local time = call('TIME')
local now = time[1] * 1000000 + time[2]
local renewed = 0
for i = 1, #KEYS do
  local slot, lease_ms = unpack_d('<dd', nums, 16 * i - 15)
  if call('TYPE', KEYS[i]).ok == 'zset' and
      call('ZADD', KEYS[i], 'XX', 'CH', now + lease_ms * 1000, string.format('%.0f', slot)) == 1 then
    call('PEXPIRE', KEYS[i], math.ceil(lease_ms) + 1000)
    renewed = renewed + 1
  end
end
return renewed
