-- wrk script for scripts/bench --accuracy: every request carries an API key
-- taken in turn from KEYS keys (X-API-Key: acc-<run>-<n>), each connection
-- starting at another offset. Arguments after "--": run id, key count, offset.
-- Prints "BENCH ..." lines like report.lua.
local run, nkeys, counter = "0", 1000, 0

init = function(args)
  run = args[1] or run
  nkeys = tonumber(args[2] or nkeys)
  counter = tonumber(args[3] or 0)
end

request = function()
  counter = counter + 1
  return wrk.format("GET", nil, { ["X-API-Key"] = "acc-" .. run .. "-" .. (counter % nkeys) })
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("BENCH requests %d\n", summary.requests))
  io.write(string.format("BENCH duration_us %d\n", summary.duration))
  io.write(string.format("BENCH errors_socket %d\n", e.connect + e.read + e.write + e.timeout))
  io.write(string.format("BENCH non2xx %d\n", e.status))
end
