-- sluice: give tokens back to buckets (a lease's unspent rest, or a request
-- that a bucket in another slot denied, or whose client left while it waited)
-- ARGV[1] holds per key four little-endian doubles: kind (as in the decide
-- script: 0 and 1 token bucket, 2 and 3 sliding window), tokens, capacity,
-- refill (a window: its length in seconds); ARGV[i + 1] is key i's expiry in
-- ms. A token bucket is refilled to now and gets its tokens back, capped at
-- its capacity, as if they had never been taken. A sliding window takes them
-- off the count of its latest window (the one the refunded request was counted
-- in, refunds coming soon after their debit), never below 0, while that
-- window is the current or the previous one. A bucket that is gone (expired:
-- it would be full) stays gone.
-- Reply: how many buckets were refunded.
local call, pack, unpack_d, nums, floor = redis.call, struct.pack, struct.unpack, ARGV[1], math.floor
local time = call('TIME')
local now = time[1] * 1000000 + time[2]
local refunded = 0
for i = 1, #KEYS do
  local kind, tokens, capacity, rate = unpack_d('<dddd', nums, 32 * i - 31)
  local v = call('GET', KEYS[i])
  if kind < 2 and v and #v == 16 then
    local st, sts = unpack_d('<dd', v)
    local ts, elapsed = now, 0
    if now > sts then elapsed = now - sts else ts = sts end
    local t = st + elapsed * rate / 1000000 + tokens
    if t > capacity then t = capacity end
    call('SET', KEYS[i], pack('<dd', t, ts), 'PX', ARGV[i + 1])
    refunded = refunded + 1
  elseif kind >= 2 and v and #v == 24 then
    local sw, sc, sp = unpack_d('<ddd', v)
    if sw >= floor(now / (rate * 1000000)) - 1 then
      sc = sc - tokens
      if sc < 0 then sc = 0 end
      call('SET', KEYS[i], pack('<ddd', sw, sc, sp), 'PX', ARGV[i + 1])
      refunded = refunded + 1
    end
  end
end
return refunded
