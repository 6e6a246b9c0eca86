-- Token-bucket rate limiting through Redis for nginx + lua-nginx-module: the
-- "nginx + Lua + Redis" anchor (row 8) of scripts/bench. It does the job Sluice
-- does on a limited route, the way OpenResty/Kong-style plugins do it:
--   * one bucket per client IP, key = prefix .. md5(client address);
--   * per request one EVALSHA of Sluice's own script (the same text, the same
--     arguments: cost, capacity, refill), over an ngx.socket.tcp cosocket taken
--     from and returned to nginx's keep-alive pool; NOSCRIPT -> EVAL once;
--   * allowed: X-RateLimit-Limit/-Remaining/-Reset on the response;
--     denied: 429 with Retry-After and a problem+json body;
--   * any Redis error or timeout: fail open (forward, no headers).
-- Configured from init_by_lua_block (see lua_redis.conf.in).

local _M = {}

local ngx = ngx
local tcp = ngx.socket.tcp
local concat = table.concat
local ceil, floor = math.ceil, math.floor
local tonumber, tostring = tonumber, tostring
local ffi = require("ffi")

-- The script takes and returns numbers as raw little-endian doubles.
local doubles = ffi.new("double[6]")
local function pack_doubles(...)
  local n = select("#", ...)
  for i = 1, n do doubles[i - 1] = select(i, ...) end
  return ffi.string(doubles, 8 * n)
end
-- The first four doubles of a 40- or 48-byte string (zeros for another size).
local function unpack_doubles(s)
  if #s ~= 40 and #s ~= 48 then return 0, 0, 0, 0 end
  ffi.copy(doubles, s, #s)
  return doubles[0], doubles[1], doubles[2], doubles[3]
end

local cfg
local script
local eval_prefix, evalsha_prefix -- the constant start of each command

local function bulk(s)
  return "$" .. #s .. "\r\n" .. s .. "\r\n"
end

function _M.configure(opts)
  cfg = opts
  local f = assert(io.open(opts.script_file, "rb"))
  script = f:read("*a")
  f:close()
  -- *7: EVALSHA sha numkeys key numbers(cost, then kind 0 = an enforced token
  -- bucket, capacity, refill, lease want 0, max wait 0, as doubles) ttl_ms
  -- deadline (the script refuses a call Redis runs after it: Sluice's limiter
  -- sends its own timeout's; this one sends a minute on, as Sluice's default)
  evalsha_prefix = "*7\r\n" .. bulk("EVALSHA") .. bulk(opts.script_sha) .. bulk("1")
  eval_prefix = "*7\r\n" .. bulk("EVAL") .. bulk(script) .. bulk("1")
  -- bucket_ttl_ms() of middleware/token_bucket.cpp
  local ttl = 1000000000000
  if opts.refill_per_second > 0 then
    ttl = math.min(ceil(opts.capacity / opts.refill_per_second * 1000) + 1000, ttl)
  end
  cfg.args = bulk(pack_doubles(opts.cost, 0, opts.capacity, opts.refill_per_second, 0, 0))
      .. bulk(string.format("%.0f", ttl))
end

-- Reads one RESP reply: a bulk string, or an array whose elements are
-- integers or bulk strings. Returns the string or a Lua array, or nil, an
-- error and whether it was an error reply of the server ("NOSCRIPT ..." for a
-- missing script; the connection stays usable).
local function read_reply(sock)
  local line, err = sock:receive("*l")
  if not line then return nil, err end
  local kind = line:sub(1, 1)
  if kind == "-" then return nil, line:sub(2), true end
  if kind == "$" then
    local len = tonumber(line:sub(2))
    local data
    data, err = sock:receive(len + 2)
    if not data then return nil, err end
    return data:sub(1, len)
  end
  if kind ~= "*" then return nil, "unexpected reply " .. line end
  local n = tonumber(line:sub(2))
  local out = {}
  for i = 1, n do
    local item
    item, err = sock:receive("*l")
    if not item then return nil, err end
    local t = item:sub(1, 1)
    if t == ":" then
      out[i] = tonumber(item:sub(2))
    elseif t == "$" then
      local len = tonumber(item:sub(2))
      local data
      data, err = sock:receive(len + 2)
      if not data then return nil, err end
      out[i] = data:sub(1, len)
    else
      return nil, "unexpected element " .. item
    end
  end
  return out
end

local function decide(key)
  local sock = tcp()
  sock:settimeouts(cfg.timeout_ms, cfg.timeout_ms, cfg.timeout_ms)
  local ok, err = sock:connect(cfg.redis_host, cfg.redis_port, { pool_size = cfg.pool_size })
  if not ok then return nil, err end
  -- The deadline in Redis' time (microseconds since the epoch: this machine's
  -- clock, which Redis reads too).
  local tail = bulk(key) .. cfg.args .. bulk(string.format("%.0f", (ngx.now() + 60) * 1000000))
  ok, err = sock:send(evalsha_prefix .. tail)
  if not ok then sock:close() return nil, err end
  local reply, server_error
  reply, err, server_error = read_reply(sock)
  if not reply and server_error and err:sub(1, 8) == "NOSCRIPT" then
    ok, err = sock:send(eval_prefix .. tail) -- EVAL caches the script again
    if not ok then sock:close() return nil, err end
    reply, err, server_error = read_reply(sock)
  end
  if not reply then
    if server_error then
      sock:setkeepalive(60000, cfg.pool_size)
    else
      sock:close() -- a timeout or a broken connection: never reuse it
    end
    return nil, err
  end
  sock:setkeepalive(60000, cfg.pool_size)
  return reply
end

function _M.access()
  local key = cfg.key_prefix .. ngx.md5(ngx.var.remote_addr)
  local reply, err = decide(key)
  if not reply then
    ngx.log(ngx.INFO, "rate limit: redis failed, failing open: ", err)
    return -- fail open
  end
  -- One token bucket: doubles(allowed + 2 * sufficient, remaining, seconds_to_cost,
  -- seconds_to_full, leased, wait); several: {allowed, sufficient, doubles(the rest)}
  local allowed, remaining, to_cost, to_full
  if type(reply) == "string" then
    allowed, remaining, to_cost, to_full = unpack_doubles(reply)
    allowed = allowed > 0 and 1 or 0
  else
    allowed = reply[1]
    remaining, to_cost, to_full = unpack_doubles(reply[3] or "")
  end
  remaining = floor(remaining)
  local h = ngx.header
  h["X-RateLimit-Limit"] = cfg.capacity
  h["X-RateLimit-Remaining"] = remaining
  h["X-RateLimit-Reset"] = ceil(to_full)
  if allowed == 1 then return end
  local retry = ceil(to_cost)
  if retry < 1 then retry = 1 end
  h["Retry-After"] = retry
  h["Cache-Control"] = "no-store"
  h["Content-Type"] = "application/problem+json"
  ngx.status = 429
  ngx.print(concat({
    '{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",',
    '"title":"Too Many Requests","status":429,"violated-policies":["per_ip"],',
    '"retry_after_ms":', tostring(ceil(to_cost * 1000)), '}' }))
  return ngx.exit(429)
end

return _M
