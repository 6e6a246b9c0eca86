-- sluice: give back the tokens of a request that a bucket in another slot denied
-- KEYS and ARGV as for token_bucket.lua. Each bucket is refilled to now, gets
-- `cost` back, capped at its capacity, as if the request had never taken
-- them. A bucket that is gone (expired: it would be full) stays gone.
-- Reply: how many buckets were refunded.
local call, pack, unpack_d, nums = redis.call, struct.pack, struct.unpack, ARGV[1]
local time = call('TIME')
local now = time[1] * 1000000 + time[2]
local cost = unpack_d('<d', nums)
local refunded = 0
for i = 1, #KEYS do
  local capacity, rate = unpack_d('<dd', nums, 16 * i - 7)
  local v = call('GET', KEYS[i])
  if v and #v == 16 then
    local st, sts = unpack_d('<dd', v)
    local ts, elapsed = now, 0
    if now > sts then elapsed = now - sts else ts = sts end
    local t = st + elapsed * rate / 1000000 + cost
    if t > capacity then t = capacity end
    call('SET', KEYS[i], pack('<dd', t, ts), 'PX', ARGV[i + 1])
    refunded = refunded + 1
  end
end
return refunded
