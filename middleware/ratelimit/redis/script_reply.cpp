#include "middleware/ratelimit/redis/script_reply.hpp"

#include <vector>

#include "common/spares.hpp"

namespace sluice {
namespace {

// The elements of an array reply as the codec reads them (views into
// `reply`), given to `decode`; the list is the thread's spare.
template <class Decode>
auto with_element_values(const redis::Reply& reply, Decode decode) {
  std::vector<ScriptReplyValue> values = Spares<std::vector<ScriptReplyValue>>::take();
  values.reserve(reply.elements.size());
  for (const auto& e : reply.elements) {
    values.push_back({e.type == redis::Reply::Type::kString, e.integer, e.str});
  }
  auto decoded = decode(std::span<const ScriptReplyValue>(values));
  keep_spare(std::move(values));
  return decoded;
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
  return with_element_values(reply, [&](std::span<const ScriptReplyValue> values) {
    return codec.decode(values, limit_count);
  });
}

std::optional<std::vector<RateDecision>> decode_batch_reply(const LimitsCodec& codec,
                                                            const redis::Reply& reply,
                                                            std::size_t request_count) {
  if (reply.type != redis::Reply::Type::kArray) return std::nullopt;
  return with_element_values(reply, [&](std::span<const ScriptReplyValue> values) {
    return codec.decode_batch(values, request_count);
  });
}

std::optional<std::vector<std::optional<RateDecision>>> decode_node_batch_reply(
    const LimitsCodec& codec, const redis::Reply& reply, std::size_t request_count) {
  if (reply.type != redis::Reply::Type::kArray) return std::nullopt;
  return with_element_values(reply, [&](std::span<const ScriptReplyValue> values) {
    return codec.decode_node_batch(values, request_count);
  });
}

}  // namespace sluice
