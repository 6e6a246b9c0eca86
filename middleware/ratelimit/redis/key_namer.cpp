#include "middleware/ratelimit/redis/key_namer.hpp"

#include "common/hex.hpp"
#include "common/spares.hpp"
#include "middleware/ratelimit/descriptors.hpp"

namespace sluice {

std::string redis_key(std::string_view key_prefix, const LimitDescriptor& descriptor,
                      KeyStyle style) {
  // Given back with the script call that sends it (upstream/redis/command_queue.hpp).
  std::string key = Spares<std::string>::take();
  if (style == KeyStyle::kPlain) {
    key.reserve(key_prefix.size() + bucket_name_size(descriptor));
    key += key_prefix;
    append_bucket_name(key, descriptor);
    return key;
  }
  key.reserve(key_prefix.size() + bucket_name_size(descriptor) + 2);
  key += key_prefix;
  key += descriptor.limit;
  key += ":{";
  hex::append(key, descriptor.key_hash);
  key += '}';
  return key;
}

std::vector<std::string> redis_keys(std::string_view key_prefix,
                                    std::span<const LimitDescriptor> descriptors, KeyStyle style) {
  std::vector<std::string> keys;
  keys.reserve(descriptors.size());
  for (const LimitDescriptor& descriptor : descriptors) {
    keys.push_back(redis_key(key_prefix, descriptor, style));
  }
  return keys;
}

}  // namespace sluice
