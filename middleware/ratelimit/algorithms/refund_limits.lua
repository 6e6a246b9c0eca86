-- sluice: give units back to limits (a lease's unspent rest, or a request
-- that a limit in another slot denied, or whose client left while it waited)
-- ARGV[1] holds per key four little-endian doubles: kind (as in the decide
-- script), units, capacity and the algorithm's first number x (a token
-- bucket's refill per second, a window's length in seconds); ARGV[i + 1] is
-- key i's expiry in ms. A limit that is gone (expired: it would be full)
-- stays gone. Reply: how many limits were refunded.
local call, pack, unpack_d, nums, floor = redis.call, struct.pack, struct.unpack, ARGV[1], math.floor
local time = call('TIME')
local now = time[1] * 1000000 + time[2]

-- ---- token bucket (0): refilled to now, it gets its tokens back, capped at
-- its capacity, as if they had never been taken.
local function bucket_refund(key, tokens, capacity, rate, ttl)
  local v = call('GET', key)
  if not (v and #v == 16) then return 0 end
  local st, sts = unpack_d('<dd', v)
  local ts, elapsed = now, 0
  if now > sts then elapsed = now - sts else ts = sts end
  local t = st + elapsed * rate / 1000000 + tokens
  if t > capacity then t = capacity end
  call('SET', key, pack('<dd', t, ts), 'PX', ttl)
  return 1
end

-- ---- sliding window (2): the units come off the count of its latest window
-- (the one the refunded request was counted in, refunds coming soon after
-- their debit), never below 0, while that window is the current or the
-- previous one.
local function window_refund(key, tokens, _, window, ttl)
  local v = call('GET', key)
  if not (v and #v == 24) then return 0 end
  local sw, sc, sp = unpack_d('<ddd', v)
  if sw < floor(now / (window * 1000000)) - 1 then return 0 end
  sc = sc - tokens
  if sc < 0 then sc = 0 end
  call('SET', key, pack('<ddd', sw, sc, sp), 'PX', ttl)
  return 1
end

-- ---- quota (4): the units come off the count of its period, never below 0,
-- while that period lasts (a refund of an ended period has nothing to give).
local function quota_refund(key, tokens)
  local v = call('GET', key)
  if not (v and #v == 16) then return 0 end
  local e, used = unpack_d('<dd', v)
  if e <= now then return 0 end
  used = used - tokens
  if used < 0 then used = 0 end
  call('SET', key, pack('<dd', e, used), 'PX', floor((e - now) / 1000) + 1000)
  return 1
end

-- ---- sliding log (6): its newest ceil(units) entries go (refunds come
-- within moments of their debit, so those are the refunded request's, or
-- entries as new).
local function log_refund(key, tokens)
  if call('TYPE', key).ok ~= 'zset' then return 0 end
  call('ZPOPMAX', key, math.ceil(tokens))
  return 1
end

-- ---- concurrency (8): the slot x is given back (the exchange holding it
-- ended, or another slot of a cluster denied the request).
local function slot_release(key, _, _, slot)
  if call('TYPE', key).ok ~= 'zset' then return 0 end
  return call('ZREM', key, string.format('%.0f', slot))
end

local refunds = {[0] = bucket_refund, [2] = window_refund, [4] = quota_refund, [6] = log_refund,
                 [8] = slot_release}
local refunded = 0
for i = 1, #KEYS do
  local kind, tokens, capacity, x = unpack_d('<dddd', nums, 32 * i - 31)
  refunded = refunded + refunds[kind - kind % 2](KEYS[i], tokens, capacity, x, ARGV[i + 1])
end
return refunded
