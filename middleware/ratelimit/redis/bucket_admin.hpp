// Reading and forgetting one bucket in Redis for the admin API:
// bucket_read.lua returns the server's TIME and the bucket's stored value in
// one read-only call, and the state now is computed with the algorithm's C++
// twin (so it is what a request would see); bucket_reset.lua deletes the
// bucket's key. Both are script calls with the bucket's key, so a Redis
// Cluster client sends them to the node owning its slot. RedisRateLimiter
// makes the calls on its client, on its executor; handlers complete there.
#pragma once

#include <optional>
#include <string_view>

#include "middleware/ratelimit/rate_limiter.hpp"
#include "upstream/redis/client.hpp"
#include "upstream/redis/reply.hpp"

namespace sluice {

// The bytes of bucket_read.lua and bucket_reset.lua.
extern const std::string_view kBucketReadScript;
extern const std::string_view kBucketResetScript;

// The bucket `bucket` as a reply of bucket_read.lua shows it: refilled to the
// reply's TIME by the token-bucket twin. A missing or malformed stored value
// is a bucket the store does not hold (full). Nullopt when the reply does not
// have the script's shape.
std::optional<BucketView> token_bucket_view(const LimitDescriptor& bucket,
                                            const redis::Reply& reply);

// Reads `bucket` (stored under `key_prefix`) with bucket_read.lua: the
// handler gets the view, the client's error, or LimiterError::kBadReply for a
// reply of another shape; operation_not_supported for an algorithm other than
// the token bucket.
void read_bucket(redis::Client& client, const redis::Script& read_script,
                 std::string_view key_prefix, const LimitDescriptor& bucket,
                 BucketViewHandler handler);

// Deletes `bucket` with bucket_reset.lua; `done` (may be empty) gets the outcome.
void reset_bucket(redis::Client& client, const redis::Script& reset_script,
                  std::string_view key_prefix, const LimitDescriptor& bucket, RefundHandler done);

}  // namespace sluice
