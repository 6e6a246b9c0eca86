-- sluice: token buckets of one request
local n = #KEYS
if n == 0 then return {1} end
local call, pack, unpack_d, nums, floor = redis.call, struct.pack, struct.unpack, ARGV[1], math.floor
local time = call('TIME')
local now = time[1] * 1000000 + time[2]
-- A bucket is stored as two little-endian doubles: tokens, timestamp_us.
-- An admitted request takes `cost` from each bucket, and a lease of up to
-- `want` more: whole tokens, at most half of what the bucket holds after cost.
if n == 1 then
  local cost, capacity, rate, want = unpack_d('<dddd', nums)
  local t, ts = capacity, now
  local v = call('MGET', KEYS[1])[1]
  if v and #v == 16 then
    local st, sts = unpack_d('<dd', v)
    local elapsed = 0
    if now > sts then elapsed = now - sts else ts = sts end
    t = st + elapsed * rate / 1000000
    if t > capacity then t = capacity end
  end
  local allowed, grant = 0, 0
  if t >= cost then
    if want > 0 then
      grant = floor((t - cost) / 2)
      if grant > want then grant = want end
    end
    allowed, t = 1, t - cost - grant
    call('SET', KEYS[1], pack('<dd', t, ts), 'PX', ARGV[2])
  end
  local to_cost, to_full = 0, 0
  if cost > capacity then to_cost = math.huge elseif t < cost then to_cost = (cost - t) / rate end
  if t < capacity then to_full = (capacity - t) / rate end
  return {allowed, allowed, pack('<dddd', t, to_cost, to_full, grant)}
end
local cost = unpack_d('<d', nums)
-- The reply doubles as scratch space: until the second loop, slots 2i and
-- 2i+1 hold bucket i's refilled tokens and timestamp.
local reply = {1, 0, 0, 0, 0}
local stored = call('MGET', unpack(KEYS))
for i = 1, n do
  local capacity, rate = unpack_d('<dd', nums, 24 * i - 15)
  local t, ts = capacity, now
  local v = stored[i]
  if v and #v == 16 then
    local st, sts = unpack_d('<dd', v)
    local elapsed = 0
    if now > sts then elapsed = now - sts else ts = sts end
    t = st + elapsed * rate / 1000000
    if t > capacity then t = capacity end
  end
  reply[2 * i], reply[2 * i + 1] = t, ts
  if t < cost then reply[1] = 0 end
end
-- Debit all or none; nothing is written on a denial.
local allowed = reply[1]
for i = 1, n do
  local capacity, rate, want = unpack_d('<ddd', nums, 24 * i - 15)
  local t = reply[2 * i]
  local sufficient, grant = 0, 0
  if t >= cost then sufficient = 1 end
  if allowed == 1 then
    if want > 0 then
      grant = floor((t - cost) / 2)
      if grant > want then grant = want end
    end
    t = t - cost - grant
    call('SET', KEYS[i], pack('<dd', t, reply[2 * i + 1]), 'PX', ARGV[i + 1])
  end
  local to_cost, to_full = 0, 0
  if cost > capacity then to_cost = math.huge elseif t < cost then to_cost = (cost - t) / rate end
  if t < capacity then to_full = (capacity - t) / rate end
  reply[2 * i], reply[2 * i + 1] = sufficient, pack('<dddd', t, to_cost, to_full, grant)
end
return reply
