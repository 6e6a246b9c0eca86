#include "middleware/ratelimit_script.hpp"

#include <openssl/sha.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <system_error>

namespace sluice {

// Kept in step with decide_token_buckets() in token_bucket.cpp: the same
// formulas in the same order, so both give bit-identical results. Fewest
// redis.calls: TIME, one MGET for all buckets, one SET ... PX per bucket on a
// debit, nothing written on a denial (refill derives from the stored time).
const std::string_view kRateLimitScript = R"lua(-- sluice: token buckets of one request
local n = #KEYS
if n == 0 then return {1} end
local fmt = string.format
local cost = tonumber(ARGV[1])
local time = redis.call('TIME')
local now = time[1] * 1000000 + time[2]
-- The reply doubles as scratch space (fewer tables): until the second loop,
-- slots 4i-1 and 4i hold bucket i's refilled tokens and timestamp.
local reply = {1, 0, 0, 0, 0}
-- Refill every bucket; a bucket is two little-endian doubles: tokens, timestamp_us.
local stored = redis.call('MGET', unpack(KEYS))
for i = 1, n do
  local capacity = tonumber(ARGV[2 * i])
  local t, ts = capacity, now
  local v = stored[i]
  if v and #v == 16 then
    local st, sts = struct.unpack('<dd', v)
    local elapsed = 0
    if now > sts then elapsed = now - sts else ts = sts end
    t = st + elapsed * tonumber(ARGV[2 * i + 1]) / 1000000
    if t > capacity then t = capacity end
  end
  reply[4 * i - 1], reply[4 * i] = t, ts
  if t < cost then reply[1] = 0 end
end
-- Debit all or none; nothing is written on a denial.
local allowed = reply[1]
for i = 1, n do
  local capacity, rate = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local t = reply[4 * i - 1]
  local sufficient = 0
  if t >= cost then sufficient = 1 end
  if allowed == 1 then
    t = t - cost
    local ttl = 1000000000000
    if rate > 0 then ttl = math.min(math.ceil(capacity / rate * 1000) + 1000, ttl) end
    redis.call('SET', KEYS[i], struct.pack('<dd', t, reply[4 * i]), 'PX', ttl)
  end
  local to_cost, to_full = '0', '0'
  if cost > capacity then
    to_cost = 'inf'
  elseif t < cost then
    to_cost = fmt('%.17g', (cost - t) / rate)
  end
  if t < capacity then to_full = fmt('%.17g', (capacity - t) / rate) end
  reply[4 * i - 2], reply[4 * i - 1] = sufficient, fmt('%.17g', t)
  reply[4 * i], reply[4 * i + 1] = to_cost, to_full
end
return reply
)lua";

namespace {

std::string format_number(double value) {
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, result.ptr);
}

// "inf" (the script's "never") or a decimal number as written by "%.17g".
std::optional<double> parse_number(std::string_view text) {
  if (text == "inf") return std::numeric_limits<double>::infinity();
  double value = 0;
  const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
  if (result.ec != std::errc{} || result.ptr != text.data() + text.size() || std::isnan(value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<bool> parse_flag(const ScriptReplyValue& value) {
  if (value.is_string || (value.integer != 0 && value.integer != 1)) return std::nullopt;
  return value.integer == 1;
}

}  // namespace

RateLimitScriptCall rate_limit_script_call(std::span<const LimitDescriptor> limits, double cost) {
  RateLimitScriptCall call;
  call.keys.reserve(limits.size());
  call.args.reserve(1 + 2 * limits.size());
  call.args.push_back(format_number(cost));
  for (const LimitDescriptor& limit : limits) {
    call.keys.push_back(limit.redis_key);
    call.args.push_back(format_number(limit.capacity));
    call.args.push_back(format_number(limit.refill_per_second));
  }
  return call;
}

std::optional<RateDecision> parse_rate_limit_reply(std::span<const ScriptReplyValue> values,
                                                   std::size_t limit_count) {
  if (values.size() != 1 + 4 * limit_count) return std::nullopt;
  RateDecision decision;
  const std::optional<bool> allowed = parse_flag(values[0]);
  if (!allowed) return std::nullopt;
  decision.allowed = *allowed;
  decision.limits.resize(limit_count);
  for (std::size_t i = 0; i < limit_count; ++i) {
    const ScriptReplyValue* item = &values[1 + 4 * i];
    const std::optional<bool> sufficient = parse_flag(item[0]);
    if (!sufficient || !item[1].is_string || !item[2].is_string || !item[3].is_string) {
      return std::nullopt;
    }
    const auto remaining = parse_number(item[1].text);
    const auto to_cost = parse_number(item[2].text);
    const auto to_full = parse_number(item[3].text);
    if (!remaining || !to_cost || !to_full) return std::nullopt;
    decision.limits[i] = LimitState{*sufficient, *remaining, *to_cost, *to_full};
  }
  return decision;
}

std::string_view rate_limit_script_sha1() {
  static const std::string hex = [] {
    unsigned char digest[SHA_DIGEST_LENGTH];
    SHA1(reinterpret_cast<const unsigned char*>(kRateLimitScript.data()), kRateLimitScript.size(),
         digest);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    out.reserve(2 * SHA_DIGEST_LENGTH);
    for (unsigned char byte : digest) {
      out += kHex[byte >> 4];
      out += kHex[byte & 0x0f];
    }
    return out;
  }();
  return hex;
}

}  // namespace sluice
