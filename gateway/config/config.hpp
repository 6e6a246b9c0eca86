// Sluice configuration: plain immutable structs, built and validated in full by
// gateway/config/load.hpp and shared read-only (std::shared_ptr<const Config>);
// a reload builds a new one. Nothing here does I/O.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gateway/client_ip.hpp"
#include "gateway/config/algorithm.hpp"
#include "gateway/config/edge_config.hpp"
#include "gateway/config/time_zone.hpp"
#include "gateway/config/traffic_config.hpp"
#include "gateway/config/observability_config.hpp"
#include "gateway/config/cost_config.hpp"
#include "upstream/header_rules.hpp"
#include "upstream/upstream_config.hpp"

namespace sluice {

using Millis = std::chrono::milliseconds;

class ServerTls;  // the TLS contexts built from TlsConfig (gateway/tls/server_tls.hpp)
struct RlsConfig;  // rls: the Envoy rate-limit service (gateway/config/rls_config.hpp)

// One certificate chain and its private key, as PEM files.
struct TlsCertificate {
  std::string cert_file;
  std::string key_file;
};

// server.tls: TLS termination on the data listener.
// ECDHE key exchange with AEAD ciphers only: no static RSA, no CBC.
inline constexpr std::string_view kDefaultTlsCiphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";
inline constexpr std::string_view kDefaultTlsCiphersuites =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

struct TlsConfig {
  // Where TLS is served. Absent: server.listen itself speaks only TLS; given:
  // server.listen stays plain HTTP and TLS is served here too.
  std::optional<HostPort> listen;
  // [0] is cert_file/key_file, the default; the rest are chosen by SNI, by the
  // DNS names (and wildcards) in each certificate.
  std::vector<TlsCertificate> certificates;
  int min_version = 12;  // 12 = TLS 1.2, 13 = TLS 1.3
  // How long a session may be resumed (a ticket's lifetime, a cache entry's).
  Millis session_timeout{7'200'000};
  // How long one key seals new session tickets before the next takes over;
  // the replaced key still opens tickets for session_timeout.
  Millis ticket_key_rotation{3'600'000};
  // OpenSSL cipher lists: TLS 1.2's (`ciphers`) and TLS 1.3's suites
  // (`ciphersuites`). The defaults allow forward-secret AEAD suites only.
  std::string ciphers{kDefaultTlsCiphers};
  std::string ciphersuites{kDefaultTlsCiphersuites};
  // ALPN offers h2 before http/1.1 (server.http2.enabled).
  bool http2 = false;
  // Client certificates: not asked for, asked for (a client without one is
  // served, one with a certificate the CAs do not verify is refused at the
  // handshake), or required.
  enum class ClientAuth : std::uint8_t { kNone, kOptional, kRequired };
  ClientAuth client_auth = ClientAuth::kNone;
  std::string client_ca_file;  // the CAs that verify client certificates (PEM)
  // The certificate field that names the consumer (subject, san_uri,
  // san_dns, fingerprint); empty: none.
  std::string client_consumer;
  // How a verified certificate goes upstream: not at all, as Envoy's
  // X-Forwarded-Client-Cert, or as X-Client-Cert-* headers. With client_auth
  // on, a client's own lines of those headers are never forwarded.
  enum class ForwardCert : std::uint8_t { kNone, kXfcc, kHeaders };
  ForwardCert forward_client_cert = ForwardCert::kNone;
  // Built at load from the files above: a configuration whose files do not
  // load or match is refused as a whole (and a reload keeps the old one).
  std::shared_ptr<const ServerTls> contexts;
};

struct ServerConfig {
  HostPort listen{"0.0.0.0", 8080};
  std::optional<TlsConfig> tls;
  unsigned threads = 0;  // 0 = one per core (resolved by the application, not here)
  std::size_t max_header_bytes = 16384;
  std::uint64_t max_body_bytes = 10485760;
  Millis header_timeout{10000};
  Millis idle_timeout{60000};
  Millis drain_timeout{10000};
  // No byte of a request body for this long: 408 (or a close once the response has started).
  Millis body_timeout{30000};
  // A client that reads nothing of a response for this long is closed.
  Millis send_timeout{30000};
  // Client connections open at once; new ones past it are closed at accept, and
  // idle keep-alive connections are closed first when near it. The process's
  // descriptor limit may lower it (see Application).
  std::size_t max_connections = 10000;
  // Request header names with "_" are dropped by default: CGI-style servers
  // read X_API_Key as X-API-Key.
  enum class Underscores { kDrop, kAllow, kReject };
  Underscores headers_with_underscores = Underscores::kDrop;
  // Default 127.0.0.1/32 (IPv4-mapped, so /128 in IPv6 terms); [] trusts no one.
  std::vector<Cidr> trusted_proxies{
      Cidr{IpAddress{{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1}}, 128}};
  // HTTP/2 from clients: h2 by ALPN on the TLS listener, h2c with prior
  // knowledge on the plain one.
  struct Http2 {
    bool enabled = false;
    std::uint32_t max_concurrent_streams = 100;  // per connection
    std::size_t max_read_ahead_bytes = 16 * 1024 * 1024;  // per connection (http2_session.hpp)
  } http2;
};

struct AdminConfig {
  HostPort listen{"127.0.0.1", 9901};
  // admin.token_file as given, and the bearer token read from it at load
  // (trailing newline removed). Empty: the endpoints that read or change
  // buckets answer only on a loopback admin listener.
  std::string token_file;
  std::string token;
  // admin.hosts: the names a request's Host may give on the protected
  // endpoints, besides loopback addresses, "localhost" and the address the
  // connection arrived on (a defence against DNS rebinding).
  std::vector<std::string> hosts;
};

struct CircuitBreakerConfig {
  unsigned failures = 5;
  Millis open{1000};
};

struct RedisConfig {
  enum class Topology { kStandalone, kSentinel, kCluster };

  std::string url = "redis://127.0.0.1:6379/0";
  // Parsed from url: redis://[user:password@]host:port[/db], rediss:// = TLS.
  bool tls = false;
  std::string host = "127.0.0.1";
  std::uint16_t port = 6379;
  std::string user;      // empty = default user
  std::string password;  // empty = no AUTH
  int db = 0;
  Millis timeout{50};
  Millis connect_timeout{1000};  // extension: redis.connect_timeout_ms
  std::string key_prefix = "sluice:";
  CircuitBreakerConfig circuit_breaker;
  // Extensions for rediss:// (verify the server against ca_file; optional client cert).
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_server_name;  // SNI and name checked in the certificate; default = host
  // How the Redis deployment is laid out. host:port from the url is the first
  // sentinel (sentinel) or seed node (cluster); `nodes` are more of them.
  Topology topology = Topology::kStandalone;
  std::vector<HostPort> nodes;
  std::string sentinel_master;    // sentinel: the monitored primary's name
  std::string sentinel_username;  // sentinel: the sentinels' own credentials
  std::string sentinel_password;
  // key_secret_file as given, and the secret read from it at load (trailing
  // newline removed): key values are then hashed with HMAC-SHA-256 under it.
  // Empty = plain SHA-256.
  std::string key_secret_file;
  std::string key_secret;
};

std::string_view to_string(RedisConfig::Topology topology) noexcept;

// The local layer: what an instance may decide without Redis.
struct LocalConfig {
  // Answer a bucket Redis just reported short of tokens without asking again
  // until it can have refilled (at most 1 s).
  bool deny_cache = true;
  // Instances sharing the buckets, for on_redis_failure: local (each enforces
  // 1/N of every limit); 0 = the number of live instances last seen in Redis.
  unsigned fleet_size = 0;
  // The largest fleet size learned from Redis that is believed; a larger
  // count (a poisoned key) is taken as this many.
  unsigned max_fleet_size = 1000;
  // Most buckets the local fallback holds per instance (least recently used go first).
  std::size_t max_buckets = 100000;
};

// Hashes a string and a view of one alike, so that a map keyed by strings is
// searched with a view: no string is made per lookup (an API key is often
// longer than a string holds without the heap).
struct TextHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view text) const noexcept {
    return std::hash<std::string_view>{}(text);
  }
};

struct Consumer {
  std::string key;
  std::string plan;
  std::string id;  // optional: what X-Consumer-Id names (empty: not sent)
  std::string org;  // optional: the organisation whose `org` limits it shares
};

struct ApiKeysConfig {
  // Where consumers are also looked up, after the YAML list: nowhere, or the
  // consumer store in Redis (changed at runtime through the admin API).
  enum class Store { kNone, kRedis };
  // What a request whose API key no consumer holds gets: limited as if it
  // had no key (missing), or 401 before any limit (reject).
  enum class UnknownKey { kMissing, kReject };

  std::string header = "X-API-Key";  // "Authorization" means "Bearer <key>"
  std::vector<Consumer> consumers;
  // key -> index in consumers
  std::unordered_map<std::string, std::size_t, TextHash, std::equal_to<>> consumer_index;
  std::string default_plan = "free";
  Store store = Store::kNone;
  // A consumer looked up in the store is trusted this long without a change
  // event; a key found unknown, for unknown_cache_ttl (at most cache_ttl).
  Millis cache_ttl{30000};
  Millis unknown_cache_ttl{5000};
  std::size_t cache_max_entries = 100000;  // per worker thread
  UnknownKey unknown_key = UnknownKey::kMissing;
  // X-Consumer-Id and X-Consumer-Plan on requests sent upstream (a client's
  // own lines of those headers are removed either way).
  bool forward_consumer = true;
};

// One source of a rate-limit key value.
struct KeySource {
  enum class Kind {
    kApiKey, kIp, kPath, kRoute, kGlobal, kHeader, kQuery, kJwt, kCert, kOrg, kBody
  };
  Kind kind = Kind::kIp;
  // The header or query parameter name, a claim path (kJwt), a client
  // certificate field (kCert: subject, san_uri, san_dns, fingerprint), or a
  // member path of the JSON request body (kBody: "model", "metadata.user").
  std::string name;
};

struct BucketParams {
  double capacity = 0;
  double refill_per_second = 0;  // token_bucket
  double window_seconds = 0;     // sliding_window, sliding_log: capacity is per this window
};

// The smallest capacity, refill_per_second or lease_tokens accepted: one
// token in about 11.6 days at that rate. Anything positive below it (5e-324)
// is a typo, and breaks the arithmetic of times to full.
inline constexpr double kMinBucketNumber = 0.000001;

// A sliding log keeps one entry per admitted unit: its capacity is capped.
inline constexpr double kMaxSlidingLogCapacity = 10000;

// A quota's calendar period, and its name in the configuration.
// kSecond: Envoy rate-limit service rules only (rls:), never a limit's period.
enum class CalendarPeriod { kMinute, kHour, kDay, kWeek, kMonth, kYear, kSecond };
std::string_view calendar_period_name(CalendarPeriod period);
std::optional<CalendarPeriod> calendar_period_named(std::string_view name);

struct LimitConfig {
  std::string name;
  std::vector<KeySource> key;  // one entry, or several for a composite key
  LimitAlgorithm algorithm = LimitAlgorithm::kTokenBucket;
  BucketParams bucket;
  // Decided and debited like any limit, but never denies (a dry run).
  bool shadow = false;
  ClientHeaders client_headers = ClientHeaders::kAll;
  // Keyed by ip: IPv6 clients share one bucket per network of this prefix
  // length (IPv4 clients are keyed by their whole address).
  unsigned ipv6_prefix = 64;
  std::map<std::string, BucketParams> plans;  // plan name -> override
  // Take up to this many tokens from Redis at a time and spend them locally
  // (hot keys); 0 = every request asks Redis.
  double lease_tokens = 0;
  // quota: capacity is per this calendar period of this zone.
  CalendarPeriod period = CalendarPeriod::kDay;
  TimeZone timezone;
  // concurrency: a slot not renewed for this long (its instance died) is free.
  Millis lease{30000};
  // Sizes per model (limits.NAME.models): the value of the limit's first
  // body: key part picks an entry, by its exact name or, failing that, by
  // the longest "prefix*" pattern that matches ("*" alone: any model).
  struct ModelParams {
    std::string pattern;  // "gpt-4o", "small-*"
    BucketParams bucket;  // the limit's, with the entry's own values
    std::map<std::string, BucketParams> plans;  // the entry's plan overrides
  };
  std::vector<ModelParams> models;
  // The parameters for a plan (the override if any, else the default).
  const BucketParams& for_plan(std::string_view plan) const;
  // The entry of `models` for a model name; null when none matches.
  const ModelParams* for_model(std::string_view model) const;
};

// What a limited route does while Redis cannot decide: let requests through,
// answer 503, or enforce each limit's share locally (LocalConfig::fleet_size).
enum class FailureMode { kOpen, kClosed, kLocal };


// What a route answers a request its limits deny; an empty body means the
// default problem+json document.
struct RejectReply {
  unsigned status = 429;
  std::string body;
  std::string content_type;  // with body only
};

struct RouteConfig {
  std::string name;
  RouteMatch match;
  std::string upstream;            // empty when `split` names the upstreams
  std::size_t upstream_index = 0;  // index into Config::upstreams
  TrafficSplit split;
  RouteTimeouts timeouts;
  std::optional<RetryPolicy> retry;  // absent: only the built-in retries (retry_rule.hpp)
  std::optional<MirrorPolicy> mirror;
  bool strip_prefix = false;
  std::vector<std::string> limits;
  std::vector<std::size_t> limit_indexes;  // indexes into Config::limits, same order
  double cost = 1;
  FailureMode on_redis_failure = FailureMode::kOpen;
  // Denied requests are answered (reject) or, when the wait for their tokens
  // is at most max_delay, reserved and forwarded after the wait (delay).
  enum class OnLimit { kReject, kDelay };
  OnLimit on_limit = OnLimit::kReject;
  Millis max_delay{0};
  // Take the cost from this request header (never forwarded); values above
  // max_cost are clamped to it (0 = the smallest capacity of the route's enforced limits).
  std::string cost_header;
  double max_cost = 0;
  RequestBodyConfig body;  // the JSON request body read before the decision
  bool reads_request_body() const { return body.read_ahead(); }
  CostFromResponse cost_from_response;
  // A client that leaves while the upstream works on its request (an
  // HTTP/1.1 connection closed or half-closed, an HTTP/2 stream reset)
  // cancels the upstream request at once (false, the default), or the
  // upstream finishes it anyway (true: uploads whose processing must
  // complete, as nginx's proxy_ignore_client_abort).
  bool ignore_client_abort = false;
  RejectReply reject;
  // Headers set or removed on the request sent upstream and on the response
  // relayed from it (empty: none).
  HeaderRules request_headers;
  HeaderRules response_headers;
  IpAccessConfig ip_access;  // checked after the global list
  CorsConfig cors;
  // Overrides every limit's own client_headers on this route when set.
  std::optional<ClientHeaders> client_headers;
  RouteAuth auth = RouteAuth::kNone;
  // Request headers only Sluice may send upstream on this route (forwarded
  // claims, client certificate headers): a client's own lines are dropped.
  std::vector<std::string> identity_headers;
};

struct Config {
  std::string source;  // file name used in messages
  // The top-level plans list, when given: every plan named anywhere is one
  // of these (empty: not declared, the plans are those the config names).
  std::vector<std::string> plans;
  ServerConfig server;
  AdminConfig admin;
  LogConfig log;
  AuditConfig audit;
  TracingConfig tracing;
  std::shared_ptr<const RlsConfig> rls;  // null: no rls section
  RedisConfig redis;
  LocalConfig local;
  ExemptionsConfig exemptions;
  IpAccessConfig ip_access;  // every route's, before its own
  AuthConfig auth;
  std::vector<UpstreamConfig> upstreams;
  ApiKeysConfig api_keys;
  std::vector<LimitConfig> limits;
  std::vector<RouteConfig> routes;

  const UpstreamConfig* find_upstream(std::string_view name) const;
  const LimitConfig* find_limit(std::string_view name) const;
};

// Whether a plan is one this configuration knows: one of `plans` when that
// list is given, else api_keys.default_plan, a YAML consumer's plan or a plan
// a limit overrides.
bool is_known_plan(const Config& config, std::string_view plan);

}  // namespace sluice
