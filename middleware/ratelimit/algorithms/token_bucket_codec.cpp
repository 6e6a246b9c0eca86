#include "middleware/ratelimit/algorithms/token_bucket_codec.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "middleware/ratelimit/algorithms/token_bucket.hpp"

namespace sluice {

namespace {

static_assert(std::endian::native == std::endian::little,
              "the script's numbers are little-endian doubles");
static_assert(sizeof(double) == 8);

// The per-key numbers of a reply: remaining, seconds_to_cost, seconds_to_full, leased.
constexpr std::size_t kReplyNumbersSize = 4 * sizeof(double);

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

std::vector<std::string> TokenBucketCodec::encode_args(std::span<const LimitDescriptor> limits,
                                                       double cost) const {
  std::vector<std::string> args;
  args.reserve(1 + limits.size());
  std::string& numbers = args.emplace_back();
  numbers.reserve(sizeof(double) * (1 + 3 * limits.size()));
  append_double(numbers, cost);
  for (const LimitDescriptor& limit : limits) {
    append_double(numbers, limit.capacity);
    append_double(numbers, limit.refill_per_second);
    append_double(numbers, limit.lease_want);
    args.push_back(std::to_string(bucket_ttl_ms(limit.capacity, limit.refill_per_second)));
  }
  return args;
}

std::vector<std::string> TokenBucketCodec::encode_refund_args(
    std::span<const BucketRefund> refunds) const {
  std::vector<std::string> args;
  args.reserve(1 + refunds.size());
  std::string& numbers = args.emplace_back();
  numbers.reserve(sizeof(double) * 3 * refunds.size());
  for (const BucketRefund& refund : refunds) {
    const LimitDescriptor& bucket = refund.bucket;
    append_double(numbers, refund.tokens);
    append_double(numbers, bucket.capacity);
    append_double(numbers, bucket.refill_per_second);
    args.push_back(std::to_string(bucket_ttl_ms(bucket.capacity, bucket.refill_per_second)));
  }
  return args;
}

std::optional<RateDecision> TokenBucketCodec::decode(std::span<const ScriptReplyValue> values,
                                                     std::size_t limit_count) const {
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
                           read_double(bytes + 16), read_double(bytes + 24)};
    if (std::isnan(state.remaining) || std::isnan(state.seconds_to_cost) ||
        std::isnan(state.seconds_to_full) || !(state.leased >= 0)) {
      return std::nullopt;
    }
    decision.limits[i] = state;
  }
  return decision;
}

}  // namespace sluice
