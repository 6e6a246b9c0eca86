-- wrk script for loadtest/many_keys.sh: every request carries the next of KEYS
-- API keys (X-API-Key: <prefix>-<n>), each connection waiting DELAY_MS between
-- its requests, so the offered rate is about connections * 1000 / DELAY_MS and
-- every key sees (that rate / KEYS) requests per second. Counts the statuses
-- and prints "STATUS <code> <count>" lines at the end.
--   wrk -t1 -c20 -d10s -s many_keys.lua URL -- PREFIX KEYS DELAY_MS
local prefix, nkeys, delay_ms = "k", 2000, 10
local counter = 0
statuses = {} -- global: done() reads it from every thread with thread:get()

init = function(args)
  prefix = args[1] or prefix
  nkeys = tonumber(args[2] or nkeys)
  delay_ms = tonumber(args[3] or delay_ms)
end

request = function()
  counter = counter + 1
  return wrk.format("GET", nil, { ["X-API-Key"] = prefix .. "-" .. (counter % nkeys) })
end

delay = function()
  return delay_ms
end

response = function(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

local threads = {}

setup = function(thread)
  table.insert(threads, thread)
end

done = function(summary, latency, requests)
  local totals = {}
  for _, thread in ipairs(threads) do
    local s = thread:get("statuses")
    for code, n in pairs(s) do
      totals[code] = (totals[code] or 0) + n
    end
  end
  for code, n in pairs(totals) do
    io.write(string.format("STATUS %d %d\n", code, n))
  end
  local e = summary.errors
  io.write(string.format("ERRORS %d\n", e.connect + e.read + e.write + e.timeout))
  io.write(string.format("DURATION_US %d\n", summary.duration))
end
