#include "middleware/ratelimit/redis/bucket_admin.hpp"

#include <charconv>
#include <cstdint>
#include <cstring>

#include "middleware/ratelimit/algorithms/algorithm.hpp"
#include "middleware/ratelimit/algorithms/limits.hpp"
#include "middleware/ratelimit/redis/key_namer.hpp"
#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"

namespace sluice {
namespace {

std::optional<std::int64_t> integer_of(const redis::Reply& reply) {
  if (reply.type == redis::Reply::Type::kInteger) return reply.integer;
  if (reply.type != redis::Reply::Type::kString) return std::nullopt;
  std::int64_t value = 0;
  const auto* end = reply.str.data() + reply.str.size();
  const auto [ptr, ec] = std::from_chars(reply.str.data(), end, value);
  if (ec != std::errc{} || ptr != end) return std::nullopt;
  return value;
}

}  // namespace

std::optional<BucketView> bucket_view(const LimitDescriptor& bucket, const redis::Reply& reply) {
  if (reply.type != redis::Reply::Type::kArray || reply.elements.size() != 3) return std::nullopt;
  const auto seconds = integer_of(reply.elements[0]);
  const auto micros = integer_of(reply.elements[1]);
  const auto& value = reply.elements[2];
  if (!seconds || !micros || value.type != redis::Reply::Type::kString) return std::nullopt;
  BucketState state = algorithm_row(bucket).stored_state(value.str);
  BucketView view;
  view.exists = state.exists;
  view.read_at_us = *seconds * 1'000'000 + *micros;
  // A decision of cost 0 with nothing to lease, wait for or shadow brings the
  // bucket to the reply's time and reports it; the state it debits is a copy.
  LimitDescriptor read = bucket;
  read.lease_want = 0;
  read.max_wait_seconds = 0;
  read.shadow = false;
  const RateDecision now = decide_limits({&state, 1}, {&read, 1}, 0, view.read_at_us);
  view.tokens = now.limits.front().remaining;
  view.seconds_to_full = now.limits.front().seconds_to_full;
  return view;
}

void read_bucket(redis::Client& client, KeyStyle style, const redis::Script& read_script,
                 std::string_view key_prefix, const LimitDescriptor& bucket,
                 BucketViewHandler handler) {
  client.evalsha(read_script, {redis_key(key_prefix, bucket, style)}, {},
                 [bucket, handler = std::move(handler)](std::error_code ec, redis::Reply reply) {
                   std::optional<BucketView> view;
                   if (!ec) view = bucket_view(bucket, reply);
                   if (!ec && !view) ec = make_error_code(LimiterError::kBadReply);
                   handler(ec, view.value_or(BucketView{}));
                 });
}

void reset_bucket(redis::Client& client, KeyStyle style, const redis::Script& reset_script,
                  std::string_view key_prefix, const LimitDescriptor& bucket, RefundHandler done) {
  client.evalsha(reset_script, {redis_key(key_prefix, bucket, style)}, {},
                 [done = std::move(done)](std::error_code ec, redis::Reply) {
                   if (done) done(ec);
                 });
}

}  // namespace sluice
