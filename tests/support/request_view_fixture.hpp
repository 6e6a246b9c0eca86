// A request for rate-limit key extraction tests: headers held in a map and
// seen through a RequestView, plus small builders of limits and API-key config.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/ascii.hpp"
#include "gateway/config/config.hpp"
#include "middleware/ratelimit/request_view.hpp"

namespace sluice::testing {

inline IpAddress ipv4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
  IpAddress ip;
  ip.bytes[10] = 0xff;
  ip.bytes[11] = 0xff;
  ip.bytes[12] = a;
  ip.bytes[13] = b;
  ip.bytes[14] = c;
  ip.bytes[15] = d;
  return ip;
}

// A request with headers held in a map (names compared case-insensitively);
// a header given by repeat() has that many lines, its value being the first.
struct Request {
  std::map<std::string, std::string> headers;  // lower-case names
  std::map<std::string, std::size_t> lines;    // lower-case names; absent: 1 if in headers
  std::string path = "/api/orders/1";
  std::string query;
  IpAddress ip = ipv4(1, 2, 3, 4);
  std::string route = "orders";

  Request& header(std::string name, std::string value) {
    ascii::to_lower_in_place(name);
    headers[name] = std::move(value);
    return *this;
  }
  Request& repeat(std::string name, std::string first_value, std::size_t count) {
    header(name, std::move(first_value));
    ascii::to_lower_in_place(name);
    lines[name] = count;
    return *this;
  }
  RequestView view() const {
    RequestView v;
    v.method = "GET";
    v.path = path;
    v.query = query;
    v.client_ip = ip;
    v.route = route;
    v.header = [this](std::string_view name) -> std::optional<std::string_view> {
      std::string key(name);
      ascii::to_lower_in_place(key);
      auto it = headers.find(key);
      if (it == headers.end()) return std::nullopt;
      return std::string_view(it->second);
    };
    v.header_count = [this](std::string_view name) -> std::size_t {
      std::string key(name);
      ascii::to_lower_in_place(key);
      if (auto it = lines.find(key); it != lines.end()) return it->second;
      return headers.count(key);
    };
    return v;
  }
};

inline LimitConfig make_limit(std::string name, std::vector<KeySource> key, double capacity = 10,
                              double rate = 1) {
  LimitConfig limit;
  limit.name = std::move(name);
  limit.key = std::move(key);
  limit.bucket = {capacity, rate};
  return limit;
}

inline ApiKeysConfig with_consumers() {
  ApiKeysConfig config;
  config.consumers = {{"demo-pro-key", "pro", "", ""}, {"other-key", "gold", "", ""}};
  for (std::size_t i = 0; i < config.consumers.size(); ++i) {
    config.consumer_index[config.consumers[i].key] = i;
  }
  return config;
}

}  // namespace sluice::testing
