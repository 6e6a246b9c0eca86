-- sluice: the buckets of one request (token buckets and sliding windows)
local n = #KEYS
if n == 0 then return {1} end
local call, pack, unpack_d, nums, floor = redis.call, struct.pack, struct.unpack, ARGV[1], math.floor
local time = call('TIME')
local now = time[1] * 1000000 + time[2]
-- Per key five doubles: kind (0 token bucket, 1 token bucket in shadow,
-- 2 sliding window, 3 sliding window in shadow), capacity, refill per second
-- (a sliding window: its window in seconds), lease want, max wait in seconds.
-- A token bucket is stored as two little-endian doubles: tokens, timestamp_us.
-- An admitted request takes `cost` from each bucket, and a lease of up to
-- `want` more: whole tokens, at most half of what the bucket holds after cost.
-- A bucket short of `cost` whose wait (cost - tokens) / refill is at most its
-- max wait is debited all the same (below zero, no lease): a reservation.
-- A stored token bucket `v` (or nil, or a value of another shape: a full one)
-- refilled to now: its tokens and the timestamp it keeps (a later stored one
-- when the clock went back).
local function refill(v, capacity, rate)
  if not (v and #v == 16) then return capacity, now end
  local st, sts = unpack_d('<dd', v)
  if now <= sts then return math.min(st, capacity), sts end
  local t = st + (now - sts) * rate / 1000000
  if t > capacity then t = capacity end
  return t, now
end
-- One enforced token bucket (kind 0), the hot path: its key, the request's
-- cost, the key's numbers and its PX `ttl`. Answers one packed string.
local function one_bucket(key, cost, capacity, rate, want, max_wait, ttl)
  local t, ts = refill(call('MGET', key)[1], capacity, rate)
  local allowed, sufficient, grant, wait = 0, 0, 0, 0
  if t >= cost then
    allowed, sufficient = 1, 1
    if want > 0 then
      grant = floor((t - cost) / 2)
      if grant > want then grant = want end
    end
  elseif max_wait > 0 and cost <= capacity then
    wait = (cost - t) / rate
    if wait > 0 and wait <= max_wait then allowed = 1 else wait = 0 end
  end
  if allowed == 1 then
    t = t - cost - grant
    call('SET', key, pack('<dd', t, ts), 'PX', ttl)
  end
  local to_cost, to_full = 0, 0
  if cost > capacity then to_cost = math.huge elseif t < cost then to_cost = (cost - t) / rate end
  if t < capacity then to_full = (capacity - t) / rate end
  -- One string, not a table: Redis converts it the cheapest way.
  return pack('<dddddd', allowed + 2 * sufficient, t, to_cost, to_full, grant, wait)
end
-- One key (not a batch, whose ARGV[1] is empty): an enforced token bucket
-- returns here, before the functions below are made (each call of a script
-- makes its functions anew).
local single = n == 1 and nums ~= ''
local cost1, kind1, capacity1, rate1, want1, max_wait1
if single then
  cost1, kind1, capacity1, rate1, want1, max_wait1 = unpack_d('<dddddd', nums)
  if kind1 == 0 then return one_bucket(KEYS[1], cost1, capacity1, rate1, want1, max_wait1, ARGV[2]) end
end
-- A sliding window is stored as three little-endian doubles: its window index
-- floor(now_us / window_us), that window's count and the previous window's.
-- Its estimate weighs the previous count by the part of the previous window
-- still inside the sliding one; a request fits when estimate + cost <= capacity.
-- Seconds until a request of `cost` fits (in this window as the previous
-- count slides out, or in the next, where the current count becomes the
-- previous one), for a window of W microseconds `e` microseconds in.
local function window_to_cost(cur, prev, e, W, capacity, cost)
  if cost > capacity then return math.huge end
  local room = capacity - cost
  if prev * ((W - e) / W) + cur <= room then return 0 end
  if cur <= room then return (W - W * (room - cur) / prev - e) / 1000000 end
  return (W - e + (W - W * room / cur)) / 1000000
end
-- A stored sliding window `v` (or nil, or a value of another shape: empty)
-- at now: its current and previous counts, window index and microseconds
-- into that window (0 when a later stored window is kept: the clock went back).
local function window_at(v, W)
  local c = floor(now / W)
  local e = now - c * W
  if not (v and #v == 24) then return 0, 0, c, e end
  local sw, sc, sp = unpack_d('<ddd', v)
  if sw == c then return sc, sp, c, e end
  if sw == c - 1 then return 0, sc, c, e end
  if sw > c then return sc, sp, sw, 0 end
  return 0, 0, c, e
end
-- One enforced sliding window (kind 2), as the general path below decides
-- it, answered as one packed string like one_bucket's (it leases nothing).
local function one_window(key, cost, capacity, window, max_wait, ttl)
  local W = window * 1000000
  local cur, prev, c, e = window_at(call('MGET', key)[1], W)
  local need = window_to_cost(cur, prev, e, W, capacity, cost)
  -- A reservation is counted in this window, so it must go within it: only
  -- while the previous count slides out (the current count leaves room).
  if need > 0 and cur + cost > capacity then need = math.huge end
  local allowed, sufficient, wait = 0, 0, 0
  if need == 0 then
    allowed, sufficient = 1, 1
  elseif need > 0 and need <= max_wait then
    allowed, wait = 1, need
  end
  if allowed == 1 then
    cur = cur + cost
    call('SET', key, pack('<ddd', c, cur, prev), 'PX', ttl)
  end
  local to_full = 0
  if cur > 0 then to_full = (W - e + W) / 1000000 elseif prev > 0 then to_full = (W - e) / 1000000 end
  return pack('<dddddd', allowed + 2 * sufficient, capacity - (prev * ((W - e) / W) + cur),
              window_to_cost(cur, prev, e, W, capacity, cost), to_full, 0, wait)
end
if single and kind1 == 2 then
  return one_window(KEYS[1], cost1, capacity1, rate1, max_wait1, ARGV[2])
end
-- A batch: ARGV[1] empty, then per key its numbers and its ttl; each key is
-- one request's one enforced key, a token bucket or a sliding window (kind 0
-- or 2: a batch holds no other), decided in order (a later request sees what
-- an earlier one took). Answers one packed string per request.
if nums == '' then
  local out = {}
  for i = 1, n do
    local cost, kind, capacity, rate, want, max_wait = unpack_d('<dddddd', ARGV[2 * i])
    if kind == 0 then
      out[i] = one_bucket(KEYS[i], cost, capacity, rate, want, max_wait, ARGV[2 * i + 1])
    elseif kind == 2 then
      out[i] = one_window(KEYS[i], cost, capacity, rate, max_wait, ARGV[2 * i + 1])
    else
      error('sluice: a batch holds enforced keys only')
    end
  end
  return out
end
local cost = unpack_d('<d', nums)
-- Per key i, scratch[6i-5 .. 6i]: its state before any debit (token bucket:
-- tokens, timestamp; sliding window: current, previous, index, elapsed_us),
-- whether it fits `cost` now, and its wait if it is reserved.
local scratch = {}
local allowed = 1
local stored = call('MGET', unpack(KEYS))
for i = 1, n do
  local kind, capacity, rate, _, max_wait = unpack_d('<ddddd', nums, 40 * i - 31)
  local v = stored[i]
  local a, b, c, d, need = capacity, now, 0, 0, 0
  if kind < 2 then
    a, b = refill(v, capacity, rate)
    if a < cost and max_wait > 0 and cost <= capacity then need = (cost - a) / rate end
  else
    local W = rate * 1000000
    a, b, c, d = window_at(v, W)
    need = window_to_cost(a, b, d, W, capacity, cost)
    -- A reservation is counted in this window, so it must go within it: only
    -- while the previous count slides out (the current count leaves room).
    if need > 0 and a + cost > capacity then need = math.huge end
  end
  local sufficient, wait = 0, 0
  if need == 0 and (kind >= 2 or a >= cost) then
    sufficient = 1
  elseif kind == 0 or kind == 2 then
    -- Enforced and short: reserved within its max wait, else the request is denied.
    if need > 0 and need <= max_wait then wait = need else allowed = 0 end
  end
  local o = 6 * i - 6
  scratch[o + 1], scratch[o + 2], scratch[o + 3], scratch[o + 4] = a, b, c, d
  scratch[o + 5], scratch[o + 6] = sufficient, wait
end
-- Debit all or none; a shadow key only when it fit `cost`. Nothing is
-- written on a denial.
local reply = {allowed}
for i = 1, n do
  local kind, capacity, rate, want = unpack_d('<dddd', nums, 40 * i - 31)
  local o = 6 * i - 6
  local t, sufficient, wait = scratch[o + 1], scratch[o + 5], scratch[o + 6]
  local debit = allowed == 1 and (kind == 0 or kind == 2 or sufficient == 1)
  local grant, to_cost, to_full = 0, 0, 0
  if allowed == 0 then wait = 0 end
  if kind < 2 then
    if debit then
      if want > 0 and sufficient == 1 then
        grant = floor((t - cost) / 2)
        if grant > want then grant = want end
      end
      t = t - cost - grant
      call('SET', KEYS[i], pack('<dd', t, scratch[o + 2]), 'PX', ARGV[i + 1])
    end
    if cost > capacity then to_cost = math.huge elseif t < cost then to_cost = (cost - t) / rate end
    if t < capacity then to_full = (capacity - t) / rate end
  else
    local W, prev, e = rate * 1000000, scratch[o + 2], scratch[o + 4]
    if debit then
      t = t + cost
      call('SET', KEYS[i], pack('<ddd', scratch[o + 3], t, prev), 'PX', ARGV[i + 1])
    end
    to_cost = window_to_cost(t, prev, e, W, capacity, cost)
    if t > 0 then to_full = (W - e + W) / 1000000 elseif prev > 0 then to_full = (W - e) / 1000000 end
    t = capacity - (prev * ((W - e) / W) + t)
  end
  reply[2 * i], reply[2 * i + 1] = sufficient, pack('<ddddd', t, to_cost, to_full, grant, wait)
end
return reply
