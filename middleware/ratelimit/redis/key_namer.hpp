// The Redis key of a bucket: key_prefix + limit name + ":" + the key hash as
// 32 lower-case hex digits, e.g. "sluice:per_ip:ba7816bf8f01cfea414140de5dae2223".
// For a Redis Cluster the hash is a hash tag, "sluice:per_ip:{ba78…2223}", so
// the buckets of every limit keyed by the same value share a slot. Only
// hashes reach Redis, never raw request data. Pure.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

enum class KeyStyle { kPlain, kHashTag };

std::string redis_key(std::string_view key_prefix, const LimitDescriptor& descriptor,
                      KeyStyle style = KeyStyle::kPlain);

// The KEYS of one script call: one per descriptor, in order.
std::vector<std::string> redis_keys(std::string_view key_prefix,
                                    std::span<const LimitDescriptor> descriptors,
                                    KeyStyle style = KeyStyle::kPlain);

}  // namespace sluice
