-- sluice: give tokens back to buckets (a lease's unspent rest, or a request
-- that a bucket in another slot denied)
-- ARGV[1] holds per key three little-endian doubles: tokens, capacity,
-- refill; ARGV[i + 1] is key i's expiry in ms. Each bucket is refilled to now
-- and gets its tokens back, capped at its capacity, as if they had never been
-- taken. A bucket that is gone (expired: it would be full) stays gone.
-- Reply: how many buckets were refunded.
local call, pack, unpack_d, nums = redis.call, struct.pack, struct.unpack, ARGV[1]
local time = call('TIME')
local now = time[1] * 1000000 + time[2]
local refunded = 0
for i = 1, #KEYS do
  local tokens, capacity, rate = unpack_d('<ddd', nums, 24 * i - 23)
  local v = call('GET', KEYS[i])
  if v and #v == 16 then
    local st, sts = unpack_d('<dd', v)
    local ts, elapsed = now, 0
    if now > sts then elapsed = now - sts else ts = sts end
    local t = st + elapsed * rate / 1000000 + tokens
    if t > capacity then t = capacity end
    call('SET', KEYS[i], pack('<dd', t, ts), 'PX', ARGV[i + 1])
    refunded = refunded + 1
  end
end
return refunded
