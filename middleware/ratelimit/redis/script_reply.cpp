#include "middleware/ratelimit/redis/script_reply.hpp"

#include <vector>

namespace sluice {

std::optional<RateDecision> decode_script_reply(const TokenBucketCodec& codec,
                                                const redis::Reply& reply,
                                                std::size_t limit_count) {
  if (reply.type == redis::Reply::Type::kString) {  // one token bucket's packed reply
    const ScriptReplyValue value{true, 0, reply.str};
    return codec.decode(std::span<const ScriptReplyValue>(&value, 1), limit_count);
  }
  std::vector<ScriptReplyValue> values;
  if (reply.type == redis::Reply::Type::kArray) {
    values.reserve(reply.elements.size());
    for (const auto& e : reply.elements) {
      ScriptReplyValue v;
      v.is_string = e.type == redis::Reply::Type::kString;
      v.integer = e.integer;
      v.text = e.str;
      values.push_back(v);
    }
  }
  return codec.decode(values, limit_count);
}

std::optional<std::vector<RateDecision>> decode_batch_reply(const TokenBucketCodec& codec,
                                                            const redis::Reply& reply,
                                                            std::size_t request_count) {
  if (reply.type != redis::Reply::Type::kArray) return std::nullopt;
  std::vector<ScriptReplyValue> values;
  values.reserve(reply.elements.size());
  for (const auto& e : reply.elements) {
    values.push_back({e.type == redis::Reply::Type::kString, e.integer, e.str});
  }
  return codec.decode_batch(values, request_count);
}

}  // namespace sluice
