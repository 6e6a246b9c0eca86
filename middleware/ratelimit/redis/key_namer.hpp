// The Redis key of a bucket: key_prefix + limit name + ":" + the key hash as
// 32 lower-case hex digits, e.g. "sluice:per_ip:ba7816bf8f01cfea414140de5dae2223".
// Only hashes reach Redis, never raw request data. Pure.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "middleware/ratelimit/rate_limiter.hpp"

namespace sluice {

std::string redis_key(std::string_view key_prefix, const LimitDescriptor& descriptor);

// The KEYS of one script call: one per descriptor, in order.
std::vector<std::string> redis_keys(std::string_view key_prefix,
                                    std::span<const LimitDescriptor> descriptors);

}  // namespace sluice
