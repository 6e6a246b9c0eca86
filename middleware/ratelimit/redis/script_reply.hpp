// The token-bucket script's reply as the Redis client returns it, turned into
// a decision by the codec. Pure.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "middleware/ratelimit/algorithms/limits_codec.hpp"
#include "upstream/redis/reply.hpp"

namespace sluice {

// The decision in `reply` for `limit_count` buckets; nullopt when the reply
// does not have the script's shape.
std::optional<RateDecision> decode_script_reply(const LimitsCodec& codec,
                                                const redis::Reply& reply,
                                                std::size_t limit_count);

// The decisions in a batch call's reply, one per request; nullopt when the
// reply does not have that shape.
std::optional<std::vector<RateDecision>> decode_batch_reply(const LimitsCodec& codec,
                                                            const redis::Reply& reply,
                                                            std::size_t request_count);

// A node batch's reply: nullopt for each request the node did not decide.
std::optional<std::vector<std::optional<RateDecision>>> decode_node_batch_reply(
    const LimitsCodec& codec, const redis::Reply& reply, std::size_t request_count);

}  // namespace sluice
