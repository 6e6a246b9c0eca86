// A JWKS URL's keys as last fetched (auth.jwt.providers[].jwks_url): shared
// by every worker, read per token, replaced by the fetcher (on one worker's
// executor) when a fetch succeeds. A failed fetch keeps the keys it had. A
// token with an unknown kid asks for a refresh, which the fetcher grants at
// most once per min_refresh: an attacker's made-up kids cannot drive fetches.
// One source per URL and settings in the process, kept across reloads (a
// reload does not forget the keys, nor fetch them again at once).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "gateway/auth/jwk_set.hpp"
#include "upstream/http/http_call.hpp"
#include "upstream/upstream_tls.hpp"

namespace sluice {

using JwksUrl = HttpUrl;

// "https://host[:port]/path[?query]", or http:// for a key server on this
// host only; nullopt with `error` set.
std::optional<JwksUrl> parse_jwks_url(std::string_view text, std::string& error);

struct JwksSettings {
  JwksUrl url;
  std::string ca_file;                      // empty: the system's trusted CAs
  std::shared_ptr<const UpstreamTls> tls;   // built from ca_file at load (https only)
  std::chrono::milliseconds refresh{300000};
  std::chrono::milliseconds min_refresh{10000};
  std::chrono::milliseconds timeout{5000};
  bool operator==(const JwksSettings& o) const {
    return url.text == o.url.text && ca_file == o.ca_file &&
           UpstreamTls::same(tls.get(), o.tls.get()) && refresh == o.refresh &&
           min_refresh == o.min_refresh && timeout == o.timeout;
  }
};

class JwksSource {
 public:
  explicit JwksSource(JwksSettings settings) : settings_(std::move(settings)) {}

  const JwksSettings& settings() const { return settings_; }

  // The keys as last fetched; null until a fetch succeeded.
  std::shared_ptr<const JwkSet> keys() const { return keys_.load(); }
  // New keys: the generation moves on, and tokens verified with the old keys
  // are checked again (a key the provider withdrew stops working at once).
  void set_keys(std::shared_ptr<const JwkSet> keys) {
    keys_.store(std::move(keys));
    generation_.fetch_add(1, std::memory_order_release);
  }
  std::uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

  // A token named a kid the keys lack: the next fetch may come early.
  void want_refresh() { wanted_.store(true, std::memory_order_relaxed); }
  bool take_wanted() { return wanted_.exchange(false, std::memory_order_relaxed); }

  // Fetch bookkeeping, the fetcher's only (one executor).
  std::chrono::steady_clock::time_point last_attempt{};
  bool attempted = false;
  bool in_flight = false;
  std::string last_body;  // the document last read: an unchanged one changes nothing

 private:
  const JwksSettings settings_;
  std::atomic<std::shared_ptr<const JwkSet>> keys_;
  std::atomic<bool> wanted_{false};
  std::atomic<std::uint64_t> generation_{0};
};

// The process' source for these settings: the one a previous configuration
// made when it is still alive, else a new one, which starts with the keys of
// a live source of the same URL (a reload that changes only how the URL is
// fetched keeps the keys until its first fetch).
std::shared_ptr<JwksSource> jwks_source(const JwksSettings& settings);

}  // namespace sluice
