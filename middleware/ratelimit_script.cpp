#include "middleware/ratelimit_script.hpp"

#include <openssl/sha.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "middleware/token_bucket.hpp"

namespace sluice {

// Kept in step with decide_token_buckets() in token_bucket.cpp: the same
// formulas in the same order, so both give bit-identical results. Fewest
// redis.calls, and only TIME, MGET and SET (all a restricted ACL user needs):
// TIME, one MGET for all buckets, one SET ... PX per bucket on a debit,
// nothing written on a denial (refill derives from the stored time).
// Cheap for Redis: numbers arrive and leave as raw doubles (struct.pack and
// struct.unpack, no decimal parsing or formatting), the TTL arrives as the
// string SET takes, and one limit (the common case) has its own short path.
const std::string_view kRateLimitScript = R"lua(-- sluice: token buckets of one request
local n = #KEYS
if n == 0 then return {1} end
local call, pack, unpack_d, nums = redis.call, struct.pack, struct.unpack, ARGV[1]
local time = call('TIME')
local now = time[1] * 1000000 + time[2]
-- A bucket is stored as two little-endian doubles: tokens, timestamp_us.
if n == 1 then
  local cost, capacity, rate = unpack_d('<ddd', nums)
  local t, ts = capacity, now
  local v = call('MGET', KEYS[1])[1]
  if v and #v == 16 then
    local st, sts = unpack_d('<dd', v)
    local elapsed = 0
    if now > sts then elapsed = now - sts else ts = sts end
    t = st + elapsed * rate / 1000000
    if t > capacity then t = capacity end
  end
  local allowed = 0
  if t >= cost then
    allowed, t = 1, t - cost
    call('SET', KEYS[1], pack('<dd', t, ts), 'PX', ARGV[2])
  end
  local to_cost, to_full = 0, 0
  if cost > capacity then to_cost = math.huge elseif t < cost then to_cost = (cost - t) / rate end
  if t < capacity then to_full = (capacity - t) / rate end
  return {allowed, allowed, pack('<ddd', t, to_cost, to_full)}
end
local cost = unpack_d('<d', nums)
-- The reply doubles as scratch space: until the second loop, slots 2i and
-- 2i+1 hold bucket i's refilled tokens and timestamp.
local reply = {1, 0, 0, 0, 0}
local stored = call('MGET', unpack(KEYS))
for i = 1, n do
  local capacity, rate = unpack_d('<dd', nums, 16 * i - 7)
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
  local capacity, rate = unpack_d('<dd', nums, 16 * i - 7)
  local t = reply[2 * i]
  local sufficient = 0
  if t >= cost then sufficient = 1 end
  if allowed == 1 then
    t = t - cost
    call('SET', KEYS[i], pack('<dd', t, reply[2 * i + 1]), 'PX', ARGV[i + 1])
  end
  local to_cost, to_full = 0, 0
  if cost > capacity then to_cost = math.huge elseif t < cost then to_cost = (cost - t) / rate end
  if t < capacity then to_full = (capacity - t) / rate end
  reply[2 * i], reply[2 * i + 1] = sufficient, pack('<ddd', t, to_cost, to_full)
end
return reply
)lua";

namespace {

static_assert(std::endian::native == std::endian::little,
              "the script's numbers are little-endian doubles");
static_assert(sizeof(double) == 8);

// The per-key numbers of a reply: remaining, seconds_to_cost, seconds_to_full.
constexpr std::size_t kReplyNumbersSize = 3 * sizeof(double);

void append_double(std::string& out, double value) {
  char bytes[sizeof(double)];
  std::memcpy(bytes, &value, sizeof(double));
  out.append(bytes, sizeof(double));
}

double read_double(const char* bytes) {
  double value = 0;
  std::memcpy(&value, bytes, sizeof(double));
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
  call.args.reserve(1 + limits.size());
  std::string& numbers = call.args.emplace_back();
  numbers.reserve(sizeof(double) * (1 + 2 * limits.size()));
  append_double(numbers, cost);
  for (const LimitDescriptor& limit : limits) {
    call.keys.push_back(limit.redis_key);
    append_double(numbers, limit.capacity);
    append_double(numbers, limit.refill_per_second);
    call.args.push_back(std::to_string(bucket_ttl_ms(limit.capacity, limit.refill_per_second)));
  }
  return call;
}

std::optional<RateDecision> parse_rate_limit_reply(std::span<const ScriptReplyValue> values,
                                                   std::size_t limit_count) {
  if (values.size() != 1 + 2 * limit_count) return std::nullopt;
  RateDecision decision;
  const std::optional<bool> allowed = parse_flag(values[0]);
  if (!allowed) return std::nullopt;
  decision.allowed = *allowed;
  decision.limits.resize(limit_count);
  for (std::size_t i = 0; i < limit_count; ++i) {
    const std::optional<bool> sufficient = parse_flag(values[1 + 2 * i]);
    const ScriptReplyValue& numbers = values[2 + 2 * i];
    if (!sufficient || !numbers.is_string || numbers.text.size() != kReplyNumbersSize) {
      return std::nullopt;
    }
    const char* bytes = numbers.text.data();
    const LimitState state{*sufficient, read_double(bytes), read_double(bytes + 8),
                           read_double(bytes + 16)};
    if (std::isnan(state.remaining) || std::isnan(state.seconds_to_cost) ||
        std::isnan(state.seconds_to_full)) {
      return std::nullopt;
    }
    decision.limits[i] = state;
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
