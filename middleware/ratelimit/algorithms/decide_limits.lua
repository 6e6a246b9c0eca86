-- sluice: the limits of one request, decided together (all or nothing)
local n = #KEYS
if n == 0 then return {1} end
local call, try, pack, unpack_d, nums, floor, huge =
  redis.call, redis.pcall, struct.pack, struct.unpack, ARGV[1], math.floor, math.huge
-- A batch (ARGV[1] empty, or 'h' when the gateway saw a key repeated in it);
-- a node batch ('n' or 'nh'): a Redis Cluster node's requests of several
-- slots, their keys in ARGV (see the batch below).
local nodes = nums == 'n' or nums == 'nh'
local batch = nums == '' or nums == 'h' or nodes
local keys = KEYS
if nodes then
  n = #ARGV - 3
  keys = {unpack(ARGV, 3, 2 + n)}
end
-- In an 'h' batch: `held` has each string-valued key's value as the batch's
-- requests left it, and `hold` keeps a value there instead of writing it (see
-- the batch below). Both nil otherwise, and a value is written at once (no
-- function is made for it: every call would pay for one).
local held, hold
local time = call('TIME')
local now = time[1] * 1000000 + time[2]
-- The last ARGV is the call's deadline in Redis time (us): the gateway stops
-- waiting for the answer then and decides without it, so a call Redis runs
-- later (it was busy, or the call waited in a queue) must change nothing.
if now > tonumber(ARGV[#ARGV]) then return {err = 'sluice: past its deadline'} end
-- Per key five doubles: kind, capacity and three numbers x, y, z of its
-- algorithm. kind is the algorithm's number (0 token bucket, 2 sliding window,
-- 4 quota, 6 sliding log, 8 concurrency), plus 1 when the key is shadow (decided, and debited
-- when it fits, but never denying).
-- Each algorithm is one section of two functions:
--   load(v, cost, capacity, x, y, z, key): its stored value `v` (nil, or of
--     another shape: absent; MGET's answer, nil for a key that is not a
--     string; a section that keeps a sorted set reads its key itself) at
--     now. Answers its state (four numbers, handed to commit), 1 when it
--     fits `cost` now (else 0), and, when it does not, the
--     seconds after which it would if it may be reserved for so long (else nil).
--   commit(key, s1, s2, s3, s4, cost, capacity, x, y, debit, fits, ttl):
--     writes the debit when `debit`, and answers remaining, seconds_to_cost,
--     seconds_to_full and leased.
-- Each call of a script makes its functions anew: one enforced key alone
-- (the hot path) makes only its own section's, and returns at its end; the
-- other calls (several keys, one in shadow, a batch) make every section's,
-- gathered in `loads` and `commits` by kind.

-- One enforced key alone, decided by its section's `load` and `commit` as
-- the general path below would, answered as one packed string: the double
-- allowed + 2 * sufficient, then its numbers (remaining, to_cost, to_full,
-- leased, wait). `prefetched`: the key's value as the batch read it (false
-- when it has none), or nil when it is read here.
-- The kinds whose value is a sorted set: their load reads the key itself.
local zsets = {[6] = true, [8] = true}
local function one(load, commit, key, cost, capacity, x, y, z, ttl, zset, prefetched)
  local v = prefetched
  if held then v = held[key] end
  if prefetched ~= nil then  -- read already, with the batch's other keys
  elseif not v and nodes then
    -- A key of a slot this node does not serve (now) fails to be read, and
    -- its request is answered '' with nothing written: the gateway sends
    -- it on its own.
    local read = try('MGET', key)
    if read.err then return '' end
    if not zset then v = read[1] end
  elseif not v and not zset then
    v = call('MGET', key)[1]
  end
  local s1, s2, s3, s4, fits, wait = load(v, cost, capacity, x, y, z, key)
  local allowed = fits
  if fits == 1 then wait = 0 elseif wait then allowed = 1 else wait = 0 end
  local remaining, to_cost, to_full, grant =
    commit(key, s1, s2, s3, s4, cost, capacity, x, y, allowed == 1, fits, ttl)
  return pack('<dddddd', allowed + 2 * fits, remaining, to_cost, to_full, grant, wait)
end
-- The numbers of one key that is not a batch (whose ARGV[1] is empty).
local cost1, kind1, capacity1, x1, y1, z1
if n == 1 and not batch then cost1, kind1, capacity1, x1, y1, z1 = unpack_d('<dddddd', nums) end
-- Every other call makes only the sections its keys use: `wanted` has the
-- kinds (shadow or not) of its keys, read from their numbers.
local loads, commits, wanted
if not kind1 or kind1 % 2 == 1 then
  loads, commits, wanted = {}, {}, {}
  -- (A batch of the wrong length is refused below, with its own error.)
  if not batch or #ARGV[2] == 56 * n then
    local kind
    for i = 1, n do
      if batch then
        kind = unpack_d('<d', ARGV[2], 56 * i - 47)
      else
        kind = unpack_d('<d', nums, 40 * i - 31)
      end
      wanted[kind - kind % 2] = true
    end
  end
end

-- ---- token bucket (0): x refill per second, y lease want, z max wait in seconds
-- Stored as two little-endian doubles: tokens, timestamp_us. A stored bucket
-- is refilled to now (a later stored timestamp is kept: the clock went back).
-- An admitted request takes `cost`, and a lease of up to `want` more: whole
-- tokens, at most half of what the bucket holds after cost. A bucket short of
-- `cost` whose wait (cost - tokens) / refill is at most its max wait is
-- debited all the same (below zero, no lease): a reservation.
if kind1 == 0 or wanted and wanted[0] then
  local function bucket_load(v, cost, capacity, rate, _, max_wait)
    local t, ts = capacity, now
    if v and #v == 16 then
      local st, sts = unpack_d('<dd', v)
      if now <= sts then
        t, ts = math.min(st, capacity), sts
      else
        t = st + (now - sts) * rate / 1000000
        if t > capacity then t = capacity end
      end
    end
    if t >= cost then return t, ts, 0, 0, 1 end
    if max_wait > 0 and cost <= capacity then
      local wait = (cost - t) / rate
      if wait > 0 and wait <= max_wait then return t, ts, 0, 0, 0, wait end
    end
    return t, ts, 0, 0, 0
  end
  local function bucket_commit(key, t, ts, _, _, cost, capacity, rate, want, debit, fits, ttl)
    local grant = 0
    if debit then
      if want > 0 and fits == 1 then
        grant = floor((t - cost) / 2)
        if grant > want then grant = want end
      end
      t = t - cost - grant
      -- Below zero (a reservation) it lives until it would be full again (ttl
      -- is the refill from empty), at most 10^12 ms, in digits.
      if t < 0 and rate > 0 then
        ttl = string.format('%.0f', math.min(math.ceil((capacity - t) / rate * 1000) + 1000, 1e12))
      end
      local v = pack('<dd', t, ts)
      if hold then hold(key, v, ttl) else call('SET', key, v, 'PX', ttl) end
    end
    local to_cost, to_full = 0, 0
    if cost > capacity then to_cost = huge elseif t < cost then to_cost = (cost - t) / rate end
    if t < capacity then to_full = (capacity - t) / rate end
    return t, to_cost, to_full, grant
  end
  if kind1 == 0 then
    return one(bucket_load, bucket_commit, KEYS[1], cost1, capacity1, x1, y1, z1, ARGV[2])
  end
  loads[0], commits[0] = bucket_load, bucket_commit
end

-- ---- sliding window (2): x window in seconds, y unused, z max wait in seconds
-- Stored as three little-endian doubles: its window index floor(now_us /
-- window_us), that window's count and the previous window's. Its estimate
-- weighs the previous count by the part of the previous window still inside
-- the sliding one; a request fits when estimate + cost <= capacity.
-- Seconds until a request of `cost` fits (in this window as the previous
-- count slides out, or in the next, where the current count becomes the
-- previous one), for a window of W microseconds `e` microseconds in.
if kind1 == 2 or wanted and wanted[2] then
  local function window_to_cost(cur, prev, e, W, capacity, cost)
    if cost > capacity then return huge end
    local room = capacity - cost
    if prev * ((W - e) / W) + cur <= room then return 0 end
    if cur <= room then return (W - W * (room - cur) / prev - e) / 1000000 end
    return (W - e + (W - W * room / cur)) / 1000000
  end
  -- Its current and previous counts, window index and microseconds into that
  -- window (0 when a later stored window is kept: the clock went back).
  local function window_load(v, cost, capacity, window, _, max_wait)
    local W = window * 1000000
    local c = floor(now / W)
    local cur, prev, e = 0, 0, now - c * W
    if v and #v == 24 then
      local sw, sc, sp = unpack_d('<ddd', v)
      if sw == c then
        cur, prev = sc, sp
      elseif sw == c - 1 then
        prev = sc
      elseif sw > c then
        cur, prev, c, e = sc, sp, sw, 0
      end
    end
    local need = window_to_cost(cur, prev, e, W, capacity, cost)
    if need == 0 then return cur, prev, c, e, 1 end
    -- A reservation is counted in this window, so it must go within it: only
    -- while the previous count slides out (the current count leaves room).
    if need > 0 and cur + cost <= capacity and need <= max_wait then return cur, prev, c, e, 0, need end
    return cur, prev, c, e, 0
  end
  local function window_commit(key, cur, prev, c, e, cost, capacity, window, _, debit, _, ttl)
    local W = window * 1000000
    if debit then
      cur = cur + cost
      local v = pack('<ddd', c, cur, prev)
      if hold then hold(key, v, ttl) else call('SET', key, v, 'PX', ttl) end
    end
    local to_full = 0
    if cur > 0 then to_full = (W - e + W) / 1000000 elseif prev > 0 then to_full = (W - e) / 1000000 end
    return capacity - (prev * ((W - e) / W) + cur), window_to_cost(cur, prev, e, W, capacity, cost),
           to_full, 0
  end
  if kind1 == 2 then
    return one(window_load, window_commit, KEYS[1], cost1, capacity1, x1, y1, z1, ARGV[2])
  end
  loads[2], commits[2] = window_load, window_commit
end

-- ---- quota (4): x, y the start and end (us) of a calendar period, z the
-- end of the period after it: the gateway's periods around a moment a little
-- before Redis' time as it estimates it
-- Stored as two little-endian doubles: the end of its period (us since the
-- epoch; it names the period) and the units used in it. The period counted
-- in is the one of the two that holds Redis' now, never one the gateway's
-- clock chose: when neither holds it (the gateway's clock moved and it has not
-- measured Redis' since) the call is refused, and nothing is written. A stored
-- period counts when it is that one; the period after it is kept too while
-- now is within a second of its start (Redis' clock stepped back, as after a
-- failover); anything else stored is replaced. Never reserved. Its key
-- expires a second after its period ends.
if kind1 == 4 or wanted and wanted[4] then
  local function quota_load(v, cost, capacity, start, stop, next_stop)
    local e
    if now >= start and now < stop then
      e = stop
    elseif now >= stop and now < next_stop then
      e = next_stop
    else
      error('sluice: no quota period holds Redis time')
    end
    local used = 0
    if v and #v == 16 then
      local se, su = unpack_d('<dd', v)
      if se == e or (se == next_stop and e == stop and stop - now <= 1000000) then
        e, used = se, su
      end
    end
    if used + cost <= capacity then return used, e, 0, 0, 1 end
    return used, e, 0, 0, 0
  end
  local function quota_commit(key, used, e, _, _, cost, capacity, _, _, debit)
    if debit then
      used = used + cost
      local v, ttl = pack('<dd', e, used), floor((e - now) / 1000) + 1000
      if hold then hold(key, v, ttl) else call('SET', key, v, 'PX', ttl) end
    end
    local left = (e - now) / 1000000
    local to_cost = 0
    if cost > capacity then to_cost = huge elseif used + cost > capacity then to_cost = left end
    return capacity - used, to_cost, left, 0
  end
  if kind1 == 4 then
    return one(quota_load, quota_commit, KEYS[1], cost1, capacity1, x1, y1, z1, ARGV[2])
  end
  loads[4], commits[4] = quota_load, quota_commit
end

-- ---- sliding log (6): x window in seconds, y the request's number (a whole
-- number unique in the fleet, as a concurrency slot's), z unused
-- A sorted set of one member per admitted unit, scored by its admission time
-- (us). A request of cost c takes ceil(c) units, members "<number>:1" ..
-- "<number>:<ceil(c)>", so that a refund removes its own request's units and
-- no other's (a debit settlement's are "<number>:d<j>"). Members of other
-- names (earlier versions wrote "<time>-<n>") count and leave alike: only
-- scores are read. Units admitted at or before now - window have left: they
-- are dropped as the log is read. Never reserved. The key expires a window
-- and a second after its last debit. A value of another algorithm under the
-- key is dropped.
if kind1 == 6 or wanted and wanted[6] then
  local function log_load(_, cost, capacity, window, _, _, key)
    if type(try('ZREMRANGEBYSCORE', key, '-inf', now - window * 1000000)) ~= 'number' then
      call('DEL', key)  -- a value of another shape
    end
    local count = call('ZCARD', key)
    if count + math.ceil(cost) <= capacity then return count, 0, 0, 0, 1 end
    return count, 0, 0, 0, 0
  end
  local function log_commit(key, count, _, _, _, cost, capacity, window, number, debit)
    local units, W = math.ceil(cost), window * 1000000
    if debit then
      local args, name = {}, string.format('%.0f:', number)
      for j = 1, units do args[2 * j - 1], args[2 * j] = now, name .. j end
      for first = 1, 2 * units, 1000 do  -- within Lua's limit on unpacked values
        call('ZADD', key, unpack(args, first, math.min(first + 999, 2 * units)))
      end
      count = count + units
      call('PEXPIRE', key, math.ceil(window * 1000) + 1000)
    end
    local to_cost, to_full = 0, 0
    if units > capacity then
      to_cost = huge
    elseif count + units > capacity then
      -- Units fit once the oldest count + units - capacity entries have left.
      local k = math.ceil(count + units - capacity) - 1
      to_cost = (tonumber(call('ZRANGE', key, k, k, 'WITHSCORES')[2]) + W - now) / 1000000
    end
    if count > 0 then
      to_full = (tonumber(call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]) + W - now) / 1000000
    end
    return capacity - count, to_cost, to_full, 0
  end
  if kind1 == 6 then
    return one(log_load, log_commit, KEYS[1], cost1, capacity1, x1, y1, z1, ARGV[2], true)
  end
  loads[6], commits[6] = log_load, log_commit
end

-- ---- concurrency (8): x this request's slot (a whole number unique in the
-- fleet), y the slot's lease in ms, z unused
-- A sorted set of the slots in use, each scored by the end of its lease (us);
-- the slots in use are those whose lease ends after now. One whose lease has
-- ended (its instance stopped renewing it) is not counted, and is dropped
-- from the set by one admission in 16 (those whose slot number is a
-- multiple of 16), which bounds what such slots take. A request takes one
-- slot whatever its cost; it is given back with ZREM (or by the refund
-- script) and renewed by renew_slots.lua. Never reserved. The key expires a
-- second after the newest slot's lease. A value of another algorithm under
-- the key is dropped.
if kind1 == 8 or wanted and wanted[8] then
  local function slots_load(_, _, capacity, _, _, _, key)
    local count = try('ZCOUNT', key, string.format('(%.0f', now), '+inf')
    if type(count) ~= 'number' then
      call('DEL', key)  -- a value of another shape
      count = 0
    end
    if count + 1 <= capacity then return count, 0, 0, 0, 1 end
    return count, 0, 0, 0, 0
  end
  local function slots_commit(key, count, _, _, _, _, capacity, slot, lease_ms, debit)
    if debit then
      if slot % 16 == 0 then call('ZREMRANGEBYSCORE', key, '-inf', now) end
      call('ZADD', key, now + lease_ms * 1000, string.format('%.0f', slot))
      call('PEXPIRE', key, math.ceil(lease_ms) + 1000)
      count = count + 1
    end
    local to_cost = 0
    if count + 1 > capacity then to_cost = 1 end
    return capacity - count, to_cost, 0, 0
  end
  if kind1 == 8 then
    return one(slots_load, slots_commit, KEYS[1], cost1, capacity1, x1, y1, z1, ARGV[2], true)
  end
  loads[8], commits[8] = slots_load, slots_commit
end

-- ---- several keys, or one in shadow, or a batch
-- A batch: ARGV[1] empty (or 'h'), then ARGV[2] with seven doubles per key:
-- its request's cost, its five numbers and its ttl in ms; each key is one
-- request's one enforced key, decided in order (a later request sees what an
-- earlier one took). Answers one packed string per request. A node batch
-- ('n' or 'nh') is the same with the keys in ARGV[3..] (KEYS[1], one of
-- them, only routes the call): keys of several slots of one Redis Cluster
-- node, which a script may read without declaring them. A key the node does
-- not serve is answered '' (above).
if batch then
  local packed = ARGV[2]
  if #packed ~= 56 * n then error('sluice: a batch with numbers for another count of keys') end
  -- A request refused for its quota's periods refuses the whole call, before
  -- any request of it is written (an error keeps what was written before it).
  for i = 1, n do
    local _, kind, _, x, _, z = unpack_d('<dddddd', packed, 56 * i - 55)
    if kind == 4 and not (now >= x and now < z) then
      error('sluice: no quota period holds Redis time')
    end
  end
  -- With a repeated key ('h'), a key's value is kept as the requests leave it
  -- and written once after them with the last one's ttl: a hot key costs one
  -- read and one write per call, and Redis ends as a write per request would
  -- leave it (every write of a call happens at the same `now`). What is kept
  -- is written before a section that keeps a sorted set runs.
  local write_held
  if nums == 'h' or nums == 'nh' then
    local ttls, order = {}, {}
    held = {}
    hold = function(key, value, ttl)
      if not held[key] then order[#order + 1] = key end
      held[key], ttls[key] = value, ttl
    end
    write_held = function()
      for _, key in ipairs(order) do call('SET', key, held[key], 'PX', ttls[key]) end
      held, ttls, order = {}, {}, {}
    end
  end
  -- A ttl goes to SET PX as the text of a whole number, written here: how
  -- Redis itself writes a Lua number differs between versions (7.2.0 to 7.2.4
  -- write 1e12 as "1e+12", which SET refuses).
  -- Without a repeated key (''), every key's value is read at once: no
  -- request of the call can change what another one reads.
  local stored
  if nums == '' then stored = call('MGET', unpack(keys)) end
  local out, ttl_texts = {}, {}
  for i = 1, n do
    local cost, kind, capacity, x, y, z, ttl = unpack_d('<ddddddd', packed, 56 * i - 55)
    if kind % 2 == 1 then error('sluice: a batch holds enforced keys only') end
    if write_held and zsets[kind] then write_held() end
    local text = ttl_texts[ttl]
    if not text then
      text = string.format('%d', ttl)
      ttl_texts[ttl] = text
    end
    out[i] = one(loads[kind], commits[kind], keys[i], cost, capacity, x, y, z, text, zsets[kind],
                 stored and stored[i])
  end
  if write_held then write_held() end
  return out
end
local cost = unpack_d('<d', nums)
-- Per key i, scratch[6i-5 .. 6i]: its loaded state, whether it fits `cost`
-- now, and its wait if it is reserved.
local scratch = {}
local allowed = 1
local stored = call('MGET', unpack(KEYS))
for i = 1, n do
  local kind, capacity, x, y, z = unpack_d('<ddddd', nums, 40 * i - 31)
  local base = kind - kind % 2
  local s1, s2, s3, s4, fits, wait = loads[base](stored[i], cost, capacity, x, y, z, KEYS[i])
  if fits == 1 or base ~= kind then
    wait = 0
  elseif not wait then
    -- Enforced and short, and not reserved: the request is denied.
    allowed, wait = 0, 0
  end
  local o = 6 * i - 6
  scratch[o + 1], scratch[o + 2], scratch[o + 3], scratch[o + 4] = s1, s2, s3, s4
  scratch[o + 5], scratch[o + 6] = fits, wait
end
-- Debit all or none; a shadow key only when it fit `cost`. Nothing is
-- written on a denial.
local reply = {allowed}
for i = 1, n do
  local kind, capacity, x, y = unpack_d('<dddd', nums, 40 * i - 31)
  local base = kind - kind % 2
  local o = 6 * i - 6
  local fits, wait = scratch[o + 5], scratch[o + 6]
  local debit = allowed == 1 and (base == kind or fits == 1)
  if allowed == 0 then wait = 0 end
  local remaining, to_cost, to_full, grant =
    commits[base](KEYS[i], scratch[o + 1], scratch[o + 2], scratch[o + 3], scratch[o + 4], cost,
                  capacity, x, y, debit, fits, ARGV[i + 1])
  reply[2 * i], reply[2 * i + 1] = fits, pack('<ddddd', remaining, to_cost, to_full, grant, wait)
end
return reply
