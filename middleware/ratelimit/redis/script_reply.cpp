#include "middleware/ratelimit/redis/script_reply.hpp"

#include <vector>

namespace sluice {
namespace {

// The elements of an array reply as the codec reads them (views into `reply`).
std::vector<ScriptReplyValue> element_values(const redis::Reply& reply) {
  std::vector<ScriptReplyValue> values;
  values.reserve(reply.elements.size());
  for (const auto& e : reply.elements) {
    values.push_back({e.type == redis::Reply::Type::kString, e.integer, e.str});
  }
  return values;
}

}  // namespace

std::optional<RateDecision> decode_script_reply(const LimitsCodec& codec,
                                                const redis::Reply& reply,
                                                std::size_t limit_count) {
  if (reply.type == redis::Reply::Type::kString) {  // one enforced key's packed reply
    const ScriptReplyValue value{true, 0, reply.str};
    return codec.decode(std::span<const ScriptReplyValue>(&value, 1), limit_count);
  }
  if (reply.type != redis::Reply::Type::kArray) return std::nullopt;
  return codec.decode(element_values(reply), limit_count);
}

std::optional<std::vector<RateDecision>> decode_batch_reply(const LimitsCodec& codec,
                                                            const redis::Reply& reply,
                                                            std::size_t request_count) {
  if (reply.type != redis::Reply::Type::kArray) return std::nullopt;
  return codec.decode_batch(element_values(reply), request_count);
}

std::optional<std::vector<std::optional<RateDecision>>> decode_node_batch_reply(
    const LimitsCodec& codec, const redis::Reply& reply, std::size_t request_count) {
  if (reply.type != redis::Reply::Type::kArray) return std::nullopt;
  return codec.decode_node_batch(element_values(reply), request_count);
}

}  // namespace sluice
