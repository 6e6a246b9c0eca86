#include "upstream/proxy_headers.hpp"

#include <array>
#include <cstdint>
#include <random>
#include <vector>

namespace sluice {
namespace {

namespace http = boost::beast::http;

constexpr std::array<http::field, 8> kHopByHop = {
    http::field::keep_alive,         http::field::proxy_connection, http::field::te,
    http::field::trailer,            http::field::transfer_encoding, http::field::upgrade,
    http::field::proxy_authorization, http::field::proxy_authenticate,
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

void strip_hop_by_hop(http::fields& fields) {
  // Names listed in Connection go first, from every Connection header line.
  std::vector<std::string> listed;
  for (auto [it, end] = fields.equal_range(http::field::connection); it != end; ++it) {
    std::string_view value = it->value();
    while (!value.empty()) {
      auto comma = value.find(',');
      auto token = trim(value.substr(0, comma));
      if (!token.empty()) listed.emplace_back(token);
      if (comma == std::string_view::npos) break;
      value.remove_prefix(comma + 1);
    }
  }
  for (const auto& name : listed) fields.erase(name);
  fields.erase(http::field::connection);
  for (auto f : kHopByHop) fields.erase(f);
}

void add_forwarded_headers(http::fields& fields, const ForwardedInfo& info) {
  std::string xff;
  for (auto [it, end] = fields.equal_range("X-Forwarded-For"); it != end; ++it) {
    auto v = trim(it->value());
    if (v.empty()) continue;
    if (!xff.empty()) xff += ", ";
    xff += v;
  }
  if (!xff.empty()) xff += ", ";
  xff += info.client_ip;
  fields.set("X-Forwarded-For", xff);
  fields.set("X-Forwarded-Proto", info.proto);
  if (!info.host.empty()) {
    fields.set("X-Forwarded-Host", info.host);
  } else {
    fields.erase("X-Forwarded-Host");
  }
  fields.set("X-Request-Id", info.request_id);

  std::string via;
  for (auto [it, end] = fields.equal_range(http::field::via); it != end; ++it) {
    if (!via.empty()) via += ", ";
    via += it->value();
  }
  if (!via.empty()) via += ", ";
  via += "1.1 sluice";
  fields.set(http::field::via, via);
}

bool is_acceptable_request_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (unsigned char c : id) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

std::string generate_request_id() {
  // One generator per thread, seeded from the OS.
  thread_local std::mt19937_64 rng{[] {
    std::random_device rd;
    return (std::uint64_t{rd()} << 32) ^ rd();
  }()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(32, '0');
  for (int half = 0; half < 2; ++half) {
    std::uint64_t v = rng();
    for (int i = 0; i < 16; ++i) {
      id[half * 16 + i] = kHex[v & 0xf];
      v >>= 4;
    }
  }
  return id;
}

}  // namespace sluice
