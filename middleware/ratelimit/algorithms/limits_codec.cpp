#include "middleware/ratelimit/algorithms/limits_codec.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string>

#include "common/spares.hpp"
#include "middleware/ratelimit/algorithms/algorithm.hpp"
#include "middleware/ratelimit/algorithms/sliding_window.hpp"
#include "middleware/ratelimit/algorithms/token_bucket.hpp"
#include "upstream/redis/redis_clock.hpp"

namespace sluice {

namespace {

static_assert(std::endian::native == std::endian::little,
              "the script's numbers are little-endian doubles");
static_assert(sizeof(double) == 8);

// The per-key numbers of a reply: remaining, seconds_to_cost, seconds_to_full,
// leased, wait.
constexpr std::size_t kReplyNumbersSize = 5 * sizeof(double);
// One enforced key's reply: allowed + 2 * sufficient, then those numbers.
constexpr std::size_t kOneKeyReplySize = kReplyNumbersSize + sizeof(double);
// One request of a batch call: its cost, its key's five numbers, the key's ttl.
constexpr std::size_t kBatchRequestSize = 7 * sizeof(double);

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

// A key's numbers as the reply carries them; nullopt when one is out of range.
std::optional<LimitState> read_state(bool sufficient, const char* bytes) {
  const LimitState state{sufficient,
                         read_double(bytes),
                         read_double(bytes + 8),
                         read_double(bytes + 16),
                         read_double(bytes + 24),
                         read_double(bytes + 32)};
  if (std::isnan(state.remaining) || std::isnan(state.seconds_to_cost) ||
      std::isnan(state.seconds_to_full) || !(state.leased >= 0) || !(state.wait_seconds >= 0) ||
      std::isinf(state.wait_seconds)) {
    return std::nullopt;
  }
  return state;
}

std::optional<bool> parse_flag(const ScriptReplyValue& value) {
  if (value.is_string || (value.integer != 0 && value.integer != 1)) return std::nullopt;
  return value.integer == 1;
}

// A key's kind in the script: its algorithm, and whether it is shadow.
double kind_of(const LimitDescriptor& limit) {
  return algorithm_row(limit).script_kind + (limit.shadow ? 1 : 0);
}

// The decimal PX of a key written by either script.
std::string ttl_ms(const LimitDescriptor& limit) {
  return std::to_string(algorithm_row(limit).key_ttl_ms(limit));
}

// A batch's first argument when a bucket comes more than once in it, and a
// node batch's (its keys in ARGV), without and with a repeated bucket.
constexpr std::string_view kHotBatch = "h";
constexpr std::string_view kNodeBatch = "n";
constexpr std::string_view kHotNodeBatch = "nh";

// Whether two of `requests` name the same bucket (a batch is at most
// kMaxBatch requests: the pairs are few).
bool repeats_a_bucket(std::span<const BatchRequest> requests) {
  for (std::size_t i = 1; i < requests.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      const LimitDescriptor& a = *requests[i].bucket;
      const LimitDescriptor& b = *requests[j].bucket;
      if (a.key_hash == b.key_hash && a.limit == b.limit) return true;
    }
  }
  return false;
}

// A call's argument list, its vector and strings from the thread's spares
// (given back by the call's record when the call ends).
std::vector<std::string> spare_args(std::size_t count) {
  std::vector<std::string> args = Spares<std::vector<std::string>>::take();
  args.reserve(count);
  return args;
}

// A key's five numbers in the script's order: kind, capacity, and its
// algorithm's three.
void append_key_numbers(std::string& out, const LimitDescriptor& limit) {
  append_double(out, kind_of(limit));
  append_double(out, limit.capacity);
  for (const double x : algorithm_row(limit).script_numbers(limit)) append_double(out, x);
}

}  // namespace

std::vector<std::string> LimitsCodec::encode_args(std::span<const LimitDescriptor> limits,
                                                  double cost) const {
  std::vector<std::string> args = spare_args(2 + limits.size());
  std::string& numbers = args.emplace_back(Spares<std::string>::take());
  numbers.reserve(sizeof(double) * (1 + 5 * limits.size()));
  append_double(numbers, cost);
  for (const LimitDescriptor& limit : limits) {
    append_key_numbers(numbers, limit);
    args.push_back(ttl_ms(limit));
  }
  args.push_back(deadline_arg());
  return args;
}

bool LimitsCodec::is_batch(std::span<const std::string> args) {
  return !args.empty() && (args[0].empty() || args[0] == kHotBatch || is_node_batch(args));
}

bool LimitsCodec::is_node_batch(std::span<const std::string> args) {
  return args.size() >= 3 && (args[0] == kNodeBatch || args[0] == kHotNodeBatch);
}

std::string LimitsCodec::deadline_arg() const {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits,
                                 redis::server_now_us() + deadline_after_us_)
                       .ptr;
  std::string out = Spares<std::string>::take();
  out.assign(digits, end);
  return out;
}

namespace {

// A batch's numbers: per request its cost, its key's five numbers, the key's ttl.
std::string batch_numbers(std::span<const BatchRequest> requests) {
  std::string numbers = Spares<std::string>::take();
  numbers.reserve(kBatchRequestSize * requests.size());
  for (const BatchRequest& request : requests) {
    append_double(numbers, request.cost);
    append_key_numbers(numbers, *request.bucket);
    append_double(numbers, static_cast<double>(algorithm_row(*request.bucket).key_ttl_ms(
                               *request.bucket)));
  }
  return numbers;
}

}  // namespace

std::vector<std::string> LimitsCodec::encode_batch_args(
    std::span<const BatchRequest> requests) const {
  std::vector<std::string> args = spare_args(3);
  args.emplace_back(repeats_a_bucket(requests) ? kHotBatch : "");
  args.push_back(batch_numbers(requests));
  args.push_back(deadline_arg());
  return args;
}

std::vector<std::string> LimitsCodec::encode_node_batch_args(
    std::span<const BatchRequest> requests, std::span<const std::string> keys) const {
  std::vector<std::string> args = spare_args(3 + keys.size());
  args.emplace_back(repeats_a_bucket(requests) ? kHotNodeBatch : kNodeBatch);
  args.push_back(batch_numbers(requests));
  for (const std::string& key : keys) args.emplace_back(Spares<std::string>::take()).assign(key);
  args.push_back(deadline_arg());
  return args;
}

std::span<const std::string> LimitsCodec::node_batch_keys(std::span<const std::string> args) {
  if (!is_node_batch(args)) return {};
  return args.subspan(2, args.size() - 3);
}

std::vector<std::string> LimitsCodec::encode_refund_args(
    std::span<const BucketRefund> refunds) const {
  std::vector<std::string> args;
  args.reserve(1 + refunds.size());
  std::string& numbers = args.emplace_back();
  numbers.reserve(sizeof(double) * 7 * refunds.size());
  for (const BucketRefund& refund : refunds) {
    const LimitDescriptor& bucket = refund.bucket;
    append_double(numbers, kind_of(bucket));
    append_double(numbers, refund.tokens);
    append_double(numbers, bucket.capacity);
    for (const double x : algorithm_row(bucket).script_numbers(bucket)) append_double(numbers, x);
    append_double(numbers, refund.max_debt);
    args.push_back(ttl_ms(bucket));
  }
  return args;
}

LimitsCodec::UndoCall LimitsCodec::undo_part(const UndoCall& undo,
                                             std::span<const std::size_t> indexes) {
  // A refund call's numbers are kRefundKeySize bytes per key, then a ttl per key.
  constexpr std::size_t kRefundKeySize = 7 * sizeof(double);
  UndoCall part;
  std::string& numbers = part.args.emplace_back();
  for (const std::size_t i : indexes) {
    if (i >= undo.keys.size() || undo.args.size() != 1 + undo.keys.size() ||
        undo.args[0].size() != kRefundKeySize * undo.keys.size()) {
      return {};
    }
    part.keys.push_back(undo.keys[i]);
    numbers.append(undo.args[0], kRefundKeySize * i, kRefundKeySize);
  }
  for (const std::size_t i : indexes) part.args.push_back(undo.args[1 + i]);
  return part;
}

std::vector<std::string> LimitsCodec::encode_renew_args(
    std::span<const LimitDescriptor> slots) const {
  std::vector<std::string> args(1);
  args[0].reserve(sizeof(double) * 2 * slots.size());
  for (const LimitDescriptor& slot : slots) {
    append_double(args[0], slot.slot);
    append_double(args[0], slot.lease_ms);
  }
  return args;
}

LimitsCodec::UndoCall LimitsCodec::undo_call(std::span<const std::string> keys,
                                             std::span<const std::string> args,
                                             std::span<const RateDecision> decisions) const {
  UndoCall undo;
  std::string numbers;
  std::vector<std::string> ttls;
  // One key's refund: kind, units, capacity, x, y, z (as the call sent them)
  // and max_debt 0, its expiry as the call set it.
  const auto give_back = [&](const std::string& key, const char* key_numbers, double units,
                             const std::string& ttl) {
    undo.keys.push_back(key);
    append_double(numbers, read_double(key_numbers));  // kind
    append_double(numbers, units);
    numbers.append(key_numbers + 8, 4 * sizeof(double));  // capacity, x, y, z
    append_double(numbers, 0);
    ttls.push_back(ttl);
  };
  if (is_node_batch(args)) keys = node_batch_keys(args);  // KEYS only routed it
  if (is_batch(args)) {
    // A batch: per request its numbers (cost, the key's five, its ttl).
    const std::size_t n = keys.size();
    if (args.size() < 2 || args[1].size() != kBatchRequestSize * n || decisions.size() != n) {
      return {};
    }
    for (std::size_t i = 0; i < n; ++i) {
      const char* request = args[1].data() + kBatchRequestSize * i;
      if (decisions[i].limits.size() != 1) return {};
      if (!decisions[i].allowed) continue;
      ++undo.requests;
      const auto ttl = static_cast<std::int64_t>(read_double(request + 6 * sizeof(double)));
      give_back(keys[i], request + 8, read_double(request) + decisions[i].limits[0].leased,
                std::to_string(ttl));
    }
  } else {
    // One request: the cost, then per key five numbers; a ttl per key.
    const std::size_t n = keys.size();
    if (args.size() < 1 + n || args[0].size() != (1 + 5 * n) * sizeof(double) ||
        decisions.size() != 1 || decisions[0].limits.size() != n) {
      return {};
    }
    if (!decisions[0].allowed) return {};
    undo.requests = 1;
    const double cost = read_double(args[0].data());
    for (std::size_t i = 0; i < n; ++i) {
      const char* key_numbers = args[0].data() + (1 + 5 * i) * sizeof(double);
      const double kind = read_double(key_numbers);
      // A shadow key (odd kind) was debited only when it had room.
      const bool shadow = std::fmod(kind, 2) == 1;
      if (shadow && !decisions[0].limits[i].sufficient) continue;
      give_back(keys[i], key_numbers, cost + decisions[0].limits[i].leased, args[1 + i]);
    }
  }
  if (undo.keys.empty()) return {};
  undo.args.reserve(1 + ttls.size());
  undo.args.push_back(std::move(numbers));
  for (std::string& ttl : ttls) undo.args.push_back(std::move(ttl));
  return undo;
}

std::optional<RateDecision> LimitsCodec::decode(std::span<const ScriptReplyValue> values,
                                                std::size_t limit_count) const {
  if (limit_count == 1 && values.size() == 1 && values[0].is_string) {
    return decode_one(values[0].text);
  }
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
    const std::optional<LimitState> state = read_state(*sufficient, numbers.text.data());
    if (!state) return std::nullopt;
    decision.limits[i] = *state;
    decision.delay_seconds = std::max(decision.delay_seconds, state->wait_seconds);
  }
  return decision;
}

std::optional<std::vector<RateDecision>> LimitsCodec::decode_batch(
    std::span<const ScriptReplyValue> values, std::size_t request_count) const {
  if (values.size() != request_count) return std::nullopt;
  std::vector<RateDecision> decisions = Spares<std::vector<RateDecision>>::take();
  decisions.reserve(request_count);
  for (const ScriptReplyValue& value : values) {
    if (!value.is_string) return std::nullopt;
    std::optional<RateDecision> decision = decode_one(value.text);
    if (!decision) return std::nullopt;
    decisions.push_back(std::move(*decision));
  }
  return decisions;
}

std::optional<std::vector<std::optional<RateDecision>>> LimitsCodec::decode_node_batch(
    std::span<const ScriptReplyValue> values, std::size_t request_count) const {
  if (values.size() != request_count) return std::nullopt;
  std::vector<std::optional<RateDecision>> decisions;
  decisions.reserve(request_count);
  for (const ScriptReplyValue& value : values) {
    if (!value.is_string) return std::nullopt;
    if (value.text.empty()) {  // a key the node does not serve: not decided
      decisions.emplace_back();
      continue;
    }
    std::optional<RateDecision> decision = decode_one(value.text);
    if (!decision) return std::nullopt;
    decisions.push_back(std::move(decision));
  }
  return decisions;
}

std::optional<RateDecision> LimitsCodec::decode_one(std::string_view numbers) const {
  if (numbers.size() != kOneKeyReplySize) return std::nullopt;
  const double flags = read_double(numbers.data());
  if (!(flags == 0 || flags == 1 || flags == 3)) return std::nullopt;  // sufficient means allowed
  const std::optional<LimitState> state = read_state(flags == 3, numbers.data() + 8);
  if (!state) return std::nullopt;
  RateDecision decision;
  decision.allowed = flags != 0;
  decision.limits.assign(1, *state);
  decision.delay_seconds = state->wait_seconds;
  return decision;
}

}  // namespace sluice
