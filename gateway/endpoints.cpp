#include "gateway/endpoints.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace sluice {

std::string endpoints_json(const Config& config) {
  // ordered_json keeps keys (and upstreams) in the order they are added.
  nlohmann::ordered_json doc;
  doc["listen"] = config.server.listen.to_string();
  doc["admin_listen"] = config.admin.listen.to_string();
  const bool uses_redis = std::any_of(config.routes.begin(), config.routes.end(),
                                      [](const RouteConfig& r) { return !r.limits.empty(); });
  if (uses_redis) {
    doc["redis"] = {
        {"host", config.redis.host}, {"port", config.redis.port}, {"tls", config.redis.tls}};
  } else {
    doc["redis"] = nullptr;
  }
  doc["upstreams"] = nlohmann::ordered_json::object();
  for (const auto& upstream : config.upstreams) {
    auto servers = nlohmann::ordered_json::array();
    for (const auto& server : upstream.servers) {
      servers.push_back({{"host", server.host}, {"port", server.port}});
    }
    doc["upstreams"][upstream.name] = std::move(servers);
  }
  return doc.dump();
}

}  // namespace sluice
