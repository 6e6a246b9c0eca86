// server: the client listener, its limits and timeouts, trusted proxies (and
// server.tls, read by tls_section.cpp).
#include <limits>

#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"
#include "gateway/config/values.hpp"

namespace sluice::config {
namespace {

constexpr std::int64_t kMaxThreads = 1024;
// One header line must fit the 16-bit sizes of the HTTP parser's field table.
constexpr std::int64_t kMaxHeaderBytes = 65535;
constexpr std::int64_t kMaxConcurrentStreams = 10000;

void read_underscores(YamlReader& r, const Field& v, ServerConfig& s) {
  const auto text = r.string(v);
  if (!text) return;
  if (*text == "drop") {
    s.headers_with_underscores = ServerConfig::Underscores::kDrop;
  } else if (*text == "allow") {
    s.headers_with_underscores = ServerConfig::Underscores::kAllow;
  } else if (*text == "reject") {
    s.headers_with_underscores = ServerConfig::Underscores::kReject;
  } else {
    r.error(v, "expected drop, allow or reject, got " + shown(*text));
  }
}

}  // namespace

void read_server(YamlReader& r, const Field& f, Config& c, ReadNotes& notes) {
  const auto m = r.mapping(f, kServerKeys.keys);
  if (!m) return;
  auto& s = c.server;
  if (auto* v = m->get("listen")) {
    auto a = read_address(r, *v, true);
    if (a) s.listen = *a;
    notes.server_listen_valid = a.has_value();
  }
  if (auto* v = m->get("threads")) {
    if (auto n = r.integer(*v, 0, kMaxThreads)) s.threads = static_cast<unsigned>(*n);
  }
  if (auto* v = m->get("max_header_bytes")) {
    if (auto n = r.integer(*v, 1, kMaxHeaderBytes)) {
      s.max_header_bytes = static_cast<std::size_t>(*n);
    }
  }
  if (auto* v = m->get("max_body_bytes")) {
    const std::int64_t max = std::numeric_limits<std::int64_t>::max();
    if (auto n = r.integer(*v, 1, max)) s.max_body_bytes = static_cast<std::uint64_t>(*n);
  }
  const std::pair<std::string_view, Millis*> durations[] = {
      {"header_timeout_ms", &s.header_timeout},
      {"idle_timeout_ms", &s.idle_timeout},
      {"drain_timeout_ms", &s.drain_timeout},
      {"body_timeout_ms", &s.body_timeout},
      {"send_timeout_ms", &s.send_timeout}};
  for (const auto& [key, target] : durations) {
    if (auto* v = m->get(key)) {
      if (auto d = read_duration(r, *v)) *target = *d;
    }
  }
  if (auto* v = m->get("max_connections")) {
    if (auto n = r.integer(*v, 1, kMaxCount)) s.max_connections = static_cast<std::size_t>(*n);
  }
  if (auto* v = m->get("headers_with_underscores")) read_underscores(r, *v, s);
  if (auto* v = m->get("http2")) {
    if (const auto h = r.mapping(*v, kHttp2Keys.keys)) {
      if (auto* e = h->get("enabled")) {
        if (auto b = r.boolean(*e)) s.http2.enabled = *b;
      }
      if (auto* n = h->get("max_concurrent_streams")) {
        if (auto count = r.integer(*n, 1, kMaxConcurrentStreams)) {
          s.http2.max_concurrent_streams = static_cast<std::uint32_t>(*count);
        }
      }
      if (auto* n = h->get("max_read_ahead_bytes")) {
        if (auto bytes = r.integer(*n, 0, std::int64_t{1} << 30)) {
          s.http2.max_read_ahead_bytes = static_cast<std::size_t>(*bytes);
        }
      }
    }
  }
  // After http2: the TLS contexts' ALPN offers h2 when it is on.
  if (auto* v = m->get("tls")) read_tls(r, *v, s, notes);
  if (auto* v = m->get("trusted_proxies")) {
    s.trusted_proxies.clear();  // present (even empty) replaces the default
    if (auto items = r.list(*v)) {
      for (const auto& item : *items) {
        if (auto cidr = read_cidr(r, item)) s.trusted_proxies.push_back(*cidr);
      }
    }
  }
}

}  // namespace sluice::config
