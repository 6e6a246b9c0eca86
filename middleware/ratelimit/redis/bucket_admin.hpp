// Reading and forgetting one bucket in Redis for the admin API:
// bucket_read.lua returns the server's TIME and the bucket's stored value in
// one read-only call, and the state now is computed with the script's C++
// twin (limits.hpp, so it is what a request would see), for token buckets
// and sliding windows alike; bucket_reset.lua deletes the
// bucket's key. Both are script calls with the bucket's key, so a Redis
// Cluster client sends them to the node owning its slot. RedisRateLimiter
// makes the calls on its client, on its executor; handlers complete there.
#pragma once

#include <optional>
#include <string_view>

#include "middleware/ratelimit/rate_limiter.hpp"
#include "middleware/ratelimit/redis/key_namer.hpp"
#include "upstream/redis/client.hpp"
#include "upstream/redis/reply.hpp"

namespace sluice {

// The bytes of bucket_read.lua and bucket_reset.lua.
extern const std::string_view kBucketReadScript;
extern const std::string_view kBucketResetScript;

// The bucket `bucket` as a reply of bucket_read.lua shows it, brought to the
// reply's TIME by the twin: a token bucket refilled, a sliding window slid
// (tokens = capacity - estimate). A missing value, or one of another shape
// than the algorithm's, is a bucket the store does not hold (full). Nullopt
// when the reply does not have the script's shape.
std::optional<BucketView> bucket_view(const LimitDescriptor& bucket, const redis::Reply& reply);

// Reads `bucket` (stored under `key_prefix`, its key written in `style`, the
// client's) with bucket_read.lua: the
// handler gets the view, the client's error, or LimiterError::kBadReply for a
// reply of another shape.
void read_bucket(redis::Client& client, KeyStyle style, const redis::Script& read_script,
                 std::string_view key_prefix, const LimitDescriptor& bucket,
                 BucketViewHandler handler);

// Deletes `bucket` with bucket_reset.lua; `done` (may be empty) gets the outcome.
void reset_bucket(redis::Client& client, KeyStyle style, const redis::Script& reset_script,
                  std::string_view key_prefix, const LimitDescriptor& bucket, RefundHandler done);

}  // namespace sluice
