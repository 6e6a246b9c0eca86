-- wrk script for scripts/bench: at the end prints machine-readable figures
-- (latencies in microseconds) that wrk's own report lacks, p99.9 in particular.
-- Lines start with "BENCH " for the parser. With arguments after "--" (a key
-- count N) every request carries X-API-Key bench-0 .. bench-<N-1> in turn; the
-- N requests are formatted once in init. Without arguments no request()
-- is defined, so wrk keeps sending its one fixed request.
-- A second argument, a file of tokens (one per line), sends "Authorization:
-- Bearer <token>" instead of the key; a third, an Origin header on every request.
init = function(args)
  local count = tonumber(args[1] or 0)
  local tokens_file = args[2]
  local origin = args[3]
  if origin == "" then origin = nil end
  if count > 0 then
    local tokens = {}
    if tokens_file and tokens_file ~= "" then
      for line in io.lines(tokens_file) do tokens[#tokens + 1] = line end
    end
    local formatted, n = {}, 0
    for i = 1, count do
      local headers = { ["X-API-Key"] = "bench-" .. (i - 1) }
      if #tokens > 0 then
        headers = { ["Authorization"] = "Bearer " .. tokens[(i - 1) % #tokens + 1] }
      end
      formatted[i] = wrk.format("GET", nil, headers)
    end
    request = function()
      n = n % count + 1
      return formatted[n]
    end
  elseif origin then
    local formatted = wrk.format("GET", nil, { ["Origin"] = origin })
    request = function() return formatted end
  end
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("BENCH requests %d\n", summary.requests))
  io.write(string.format("BENCH duration_us %d\n", summary.duration))
  io.write(string.format("BENCH bytes %d\n", summary.bytes))
  io.write(string.format("BENCH p50_us %d\n", latency:percentile(50)))
  io.write(string.format("BENCH p99_us %d\n", latency:percentile(99)))
  io.write(string.format("BENCH p999_us %d\n", latency:percentile(99.9)))
  io.write(string.format("BENCH max_us %d\n", latency.max))
  io.write(string.format("BENCH mean_us %.1f\n", latency.mean))
  io.write(string.format("BENCH errors_socket %d\n", e.connect + e.read + e.write + e.timeout))
  io.write(string.format("BENCH non2xx %d\n", e.status))
end
