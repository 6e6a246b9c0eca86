-- sluice: give units back to limits (a lease's unspent rest, a request that a
-- limit in another slot denied or whose client left while it waited, a
-- response that cost less than its estimate), or take more (a response that
-- cost more: negative units)
-- ARGV[1] holds per key seven little-endian doubles: kind (as in the decide
-- script), units (negative: a debit), capacity, the algorithm's three numbers
-- x, y, z (as in the decide script), and max_debt: how far below empty a
-- debit may take the limit. ARGV[i + 1] is key i's expiry in ms.
-- A refund to a limit that is gone (expired: it would be full) leaves it
-- gone; a debit finds it full. Reply: how many limits were changed.
local call, pack, unpack_d, nums, floor = redis.call, struct.pack, struct.unpack, ARGV[1], math.floor
local time = call('TIME')
local now = time[1] * 1000000 + time[2]

-- The string values are read at once (MGET, a thousand keys a call: within
-- Lua's limit on unpacked values); a key refunded twice in one call reads
-- what its first refund wrote (`written`). A section that keeps a sorted set
-- reads its key itself. A refund (units > 0) keeps the key's expiry: the
-- limit it leaves is fuller than the one the decision set the expiry for (a
-- bucket lives until it would be full again, a window and a quota until
-- their count is of no use), so it too would be full or spent by then
-- (SET's KEEPTTL, Redis 6.0 on). A debit sets the expiry.
local stored, written = {}, {}
for first = 1, #KEYS, 1000 do
  local last = math.min(first + 999, #KEYS)
  local values = call('MGET', unpack(KEYS, first, last))
  for j = first, last do stored[j] = values[j - first + 1] end
end
local function write(key, value, tokens, ttl)
  if tokens > 0 then
    call('SET', key, value, 'KEEPTTL')
  else
    call('SET', key, value, 'PX', ttl)
  end
  written[key] = value
end

-- ---- token bucket (0): refilled to now, it gets its tokens back, capped at
-- its capacity, as if they had never been taken; a debit takes tokens, down
-- to -max_debt at most (a bucket already lower stays where it is), and the
-- key then lives until the bucket would be full again, at most 10^12 ms
-- (about 31 years, the cap of the gateway's bucket expiry), written in
-- digits: however slow the refill, PX stays a whole number Redis takes
-- (a number Lua hands over may reach it as "1e+17").
local function bucket_refund(key, tokens, capacity, rate, _, _, max_debt, ttl, v)
  local t, ts = capacity, now
  if v and #v == 16 then
    local st, sts = unpack_d('<dd', v)
    local elapsed = 0
    if now > sts then elapsed = now - sts else ts = sts end
    t = st + elapsed * rate / 1000000
    if t > capacity then t = capacity end
  elseif tokens > 0 then
    return 0
  end
  local nt = t + tokens
  if nt > capacity then nt = capacity end
  if tokens < 0 and nt < -max_debt then nt = math.min(t, -max_debt) end
  if tokens < 0 and nt < 0 and rate > 0 then
    ttl = string.format('%.0f', math.min(math.ceil((capacity - nt) / rate * 1000) + 1000, 1e12))
  end
  write(key, pack('<dd', nt, ts), tokens, ttl)
  return 1
end

-- ---- sliding window (2): the units come off the count of its latest window
-- (the one the refunded request was counted in, refunds coming soon after
-- their debit), never below 0, while that window is the current or the
-- previous one; a debit adds to the current window's count, up to capacity +
-- max_debt.
local function window_refund(key, tokens, capacity, window, _, _, max_debt, ttl, v)
  local W = window * 1000000
  local c = floor(now / W)
  local sw, sc, sp = c, 0, 0
  if v and #v == 24 then
    sw, sc, sp = unpack_d('<ddd', v)
    if tokens < 0 and sw < c then
      if sw == c - 1 then sp = sc else sp = 0 end
      sw, sc = c, 0
    end
  elseif tokens > 0 then
    return 0
  end
  if tokens > 0 and sw < c - 1 then return 0 end
  local nc = sc - tokens
  if nc < 0 then nc = 0 end
  if tokens < 0 and nc > capacity + max_debt then nc = math.max(sc, capacity + max_debt) end
  write(key, pack('<ddd', sw, nc, sp), tokens, ttl)
  return 1
end

-- ---- quota (4): the units come off the count of its period, never below 0,
-- while that period lasts (a refund of an ended period has nothing to give,
-- and one of a later period's count is not the request's);
-- a debit adds to the count of the period holding Redis' now (x, y, z: the
-- gateway's periods, as in the decide script: a stored period other than the
-- one of them that holds now is replaced; when neither holds now, nothing is
-- debited), up to capacity + max_debt.
local function quota_refund(key, tokens, capacity, start, stop, next_stop, max_debt, _, v)
  local e, used = 0, 0
  if v and #v == 16 then e, used = unpack_d('<dd', v) end
  if tokens > 0 then
    -- Only while the request's own period (one of the two it was decided
    -- with) is the one stored and still running.
    if e <= now or (e ~= stop and e ~= next_stop) then return 0 end
  else
    local current
    if now >= start and now < stop then
      current = stop
    elseif now >= stop and now < next_stop then
      current = next_stop
    else
      return 0
    end
    if e ~= current and not (e == next_stop and current == stop and stop - now <= 1000000) then
      e, used = current, 0
    end
  end
  local nu = used - tokens
  if nu < 0 then nu = 0 end
  if tokens < 0 and nu > capacity + max_debt then nu = math.max(used, capacity + max_debt) end
  write(key, pack('<dd', e, nu), tokens, floor((e - now) / 1000) + 1000)
  return 1
end

-- ---- sliding log (6): y is the number of the request refunded or debited
-- (the decide script's). A refund removes ceil(units) of that request's own
-- entries ("<number>:1" on; those still in the window: one that has left
-- gives nothing back), never another request's; a debit logs ceil(units)
-- more entries now ("<number>:d1" on), up to capacity + max_debt entries.
-- Both name their members: one applied twice counts once.
local function log_refund(key, tokens, capacity, window, number, _, max_debt)
  local kind = call('TYPE', key).ok
  local name = string.format('%.0f:', number)
  if tokens > 0 then
    if kind ~= 'zset' then return 0 end
    local members = {}
    for j = 1, math.ceil(tokens) do members[j] = name .. j end
    for first = 1, #members, 1000 do  -- within Lua's limit on unpacked values
      call('ZREM', key, unpack(members, first, math.min(first + 999, #members)))
    end
    return 1
  end
  if kind ~= 'zset' and kind ~= 'none' then call('DEL', key) end
  call('ZREMRANGEBYSCORE', key, '-inf', now - window * 1000000)
  local count = call('ZCARD', key)
  local units = math.min(math.ceil(-tokens), math.max(0, capacity + max_debt - count))
  for j = 1, units do call('ZADD', key, now, name .. 'd' .. j) end
  if units > 0 then call('PEXPIRE', key, math.ceil(window * 1000) + 1000) end
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
local changed = 0
for i = 1, #KEYS do
  local kind, units, capacity, x, y, z, max_debt = unpack_d('<ddddddd', nums, 56 * i - 55)
  local key = KEYS[i]
  changed = changed + refunds[kind - kind % 2](key, units, capacity, x, y, z, max_debt,
                                               ARGV[i + 1], written[key] or stored[i])
end
return changed
