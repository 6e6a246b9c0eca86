#include "gateway/config.hpp"

#include "gateway/config_checks.hpp"
#include "gateway/config_env.hpp"
#include "gateway/request_target.hpp"

#include <arpa/inet.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <span>
#include <sstream>
#include <variant>

namespace sluice {
namespace {

constexpr std::int64_t kMaxDurationMs = std::numeric_limits<std::int32_t>::max();  // ~24.8 days
constexpr std::int64_t kMaxThreads = 1024;
constexpr std::int64_t kMaxCount = 1000000;  // failures, idle connections
constexpr std::int64_t kMaxHeaderBytes = 65535;
constexpr std::size_t kMaxConsumerKeyBytes = 256;
constexpr std::uint16_t kDefaultRedisPort = 6379;
constexpr std::string_view kPathKeys = "path_prefix, path_exact or path_regex";
constexpr std::size_t kMaxShownBytes = 120;  // longer values are cut in messages

// ---------------------------------------------------------------- accepted keys
// The keys each mapping accepts: the parser rejects any other key with these
// tables, and config_key_paths() lists them for the documentation test.

struct Section {
  std::string_view path;  // as documented: "upstreams.NAME", "routes[].match"
  std::span<const std::string_view> keys;
};

constexpr std::string_view kRootKeys[] = {"server",    "admin",    "log",    "redis",
                                          "upstreams", "api_keys", "limits", "routes"};
constexpr std::string_view kServerKeys[] = {"listen",
                                            "threads",
                                            "max_header_bytes",
                                            "max_body_bytes",
                                            "header_timeout_ms",
                                            "idle_timeout_ms",
                                            "drain_timeout_ms",
                                            "body_timeout_ms",
                                            "send_timeout_ms",
                                            "max_connections",
                                            "headers_with_underscores",
                                            "trusted_proxies"};
constexpr std::string_view kAdminKeys[] = {"listen"};
constexpr std::string_view kLogKeys[] = {"level", "access_log"};
constexpr std::string_view kRedisKeys[] = {"url",           "timeout_ms",      "connect_timeout_ms",
                                           "key_prefix",    "circuit_breaker", "tls_ca_file",
                                           "tls_cert_file", "tls_key_file",    "tls_server_name"};
constexpr std::string_view kCircuitBreakerKeys[] = {"failures", "open_ms"};
constexpr std::string_view kUpstreamKeys[] = {
    "servers",         "connect_timeout_ms", "response_timeout_ms", "max_idle_connections",
    "max_connections", "fail_cooldown_ms"};
constexpr std::string_view kApiKeysKeys[] = {"header", "consumers", "default_plan"};
constexpr std::string_view kConsumerKeys[] = {"key", "plan"};
constexpr std::string_view kLimitKeys[] = {"key", "capacity", "refill_per_second", "plans"};
constexpr std::string_view kPlanKeys[] = {"capacity", "refill_per_second"};
constexpr std::string_view kRouteKeys[] = {"name",   "match", "upstream",        "strip_prefix",
                                           "limits", "cost",  "on_redis_failure"};
constexpr std::string_view kMatchKeys[] = {"path_prefix", "path_exact", "path_regex", "methods",
                                           "host"};

constexpr Section kRoot{"", kRootKeys};
constexpr Section kServer{"server", kServerKeys};
constexpr Section kAdmin{"admin", kAdminKeys};
constexpr Section kLog{"log", kLogKeys};
constexpr Section kRedis{"redis", kRedisKeys};
constexpr Section kCircuitBreaker{"redis.circuit_breaker", kCircuitBreakerKeys};
constexpr Section kUpstream{"upstreams.NAME", kUpstreamKeys};
constexpr Section kApiKeys{"api_keys", kApiKeysKeys};
constexpr Section kConsumer{"api_keys.consumers[]", kConsumerKeys};
constexpr Section kLimit{"limits.NAME", kLimitKeys};
constexpr Section kPlan{"limits.NAME.plans.PLAN", kPlanKeys};
constexpr Section kRoute{"routes[]", kRouteKeys};
constexpr Section kMatch{"routes[].match", kMatchKeys};

constexpr const Section* kSections[] = {
    &kRoot,    &kServer,   &kAdmin, &kLog,  &kRedis, &kCircuitBreaker, &kUpstream,
    &kApiKeys, &kConsumer, &kLimit, &kPlan, &kRoute, &kMatch};

// Request paths reach path_regex unchecked (up to max_header_bytes), so the
// regex must not recurse once per input character as libstdc++'s default
// (backtracking) executor does: a 16 KB path can overflow a thread's stack.
// The polynomial mode uses the breadth-first executor (no back-references).
#if defined(__GLIBCXX__)
constexpr auto kRegexFlags =
    std::regex::ECMAScript | std::regex::optimize | std::regex_constants::__polynomial;
#else
constexpr auto kRegexFlags = std::regex::ECMAScript | std::regex::optimize;
#endif

// ---------------------------------------------------------------- text helpers

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
char to_lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}
char to_upper(char c) {
  return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_digit);
}

// RFC 9110 token: header names and methods.
bool is_token(std::string_view s) {
  constexpr std::string_view kSpecials = "!#$%&'*+-.^_`|~";
  return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
    return is_digit(c) || is_alpha(c) || kSpecials.find(c) != std::string_view::npos;
  });
}

// Names of upstreams, limits and routes appear in metric labels, Redis keys and
// RateLimit headers, so they are kept to a safe alphabet.
bool is_valid_name(std::string_view s) {
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
    return is_digit(c) || is_alpha(c) || c == '_' || c == '-' || c == '.';
  });
}

bool is_host_name(std::string_view s) {
  return !s.empty() && s.size() <= 253 && std::all_of(s.begin(), s.end(), [](char c) {
    return is_digit(c) || is_alpha(c) || c == '-' || c == '.' || c == '_';
  });
}

bool is_ip_literal(std::string_view s, int family) {
  if (s.empty() || s.size() >= 64) return false;
  char buf[64];
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
  unsigned char out[16];
  return inet_pton(family, buf, out) == 1;
}

// A value as messages show it: in double quotes, with quotes, backslashes and
// control characters escaped, cut after kMaxShownBytes.
std::string quoted(std::string_view s) {
  std::string out = "\"";
  const bool cut = s.size() > kMaxShownBytes;
  if (cut) s = s.substr(0, kMaxShownBytes);
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += cut ? "...\"" : "\"";
  return out;
}

// A redis url with its credentials and anything after "?" or "#" hidden, so
// that it can be shown: "redis://user:***@host:6379/0". A lone userinfo word is
// a password.
std::string redact_url(std::string_view url) {
  const auto scheme_end = url.find("://");
  const std::size_t rest_begin = scheme_end == std::string_view::npos ? 0 : scheme_end + 3;
  std::string out(url.substr(0, rest_begin));
  auto rest = url.substr(rest_begin);
  // Credentials end at the last "@", even when a "/", "?" or "#" in the
  // password comes before it.
  if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
    const auto userinfo = rest.substr(0, at);
    const auto colon = userinfo.find(':');
    if (colon != std::string_view::npos) out += userinfo.substr(0, colon + 1);
    out += "***";
    rest = rest.substr(at);
  }
  if (const auto q = rest.find_first_of("?#"); q != std::string_view::npos) {
    out += rest.substr(0, q + 1);
    out += "***";
  } else {
    out += rest;
  }
  return out;
}

// 50 -> "50", 0.5 -> "0.5".
std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::optional<std::uint16_t> parse_port(std::string_view s, unsigned min) {
  if (!all_digits(s) || s.size() > 5) return std::nullopt;
  unsigned v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  if (v < min || v > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(v);
}

// "host:port" or "[v6]:port". A listener needs an IP literal and may use port 0
// (any free port); an upstream server may be a name. Returns an error message.
std::variant<HostPort, std::string> parse_address(std::string_view text, bool listener) {
  const std::string expected = "expected host:port, got " + quoted(text);
  HostPort out;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return expected;
    }
    const auto host = text.substr(1, close - 1);
    if (!is_ip_literal(host, AF_INET6)) return "invalid IPv6 address " + quoted(host);
    out.host = std::string(host);
    port_text = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0) return expected;
    const auto host = text.substr(0, colon);
    if (host.find(':') != std::string_view::npos) {
      return "IPv6 addresses need brackets, e.g. \"[::1]:8080\", got " + quoted(text);
    }
    const bool looks_v4 =
        std::all_of(host.begin(), host.end(), [](char c) { return is_digit(c) || c == '.'; });
    if (looks_v4 && !is_ip_literal(host, AF_INET)) return "invalid IPv4 address " + quoted(host);
    if (listener && !looks_v4) {
      return "host must be an IP address, not a name, got " + quoted(text);
    }
    if (!is_host_name(host)) return "invalid host " + quoted(host);
    out.host = std::string(host);
    port_text = text.substr(colon + 1);
  }
  const unsigned min_port = listener ? 0 : 1;
  const auto port = parse_port(port_text, min_port);
  if (!port) {
    return "port must be between " + std::to_string(min_port) + " and 65535, got " + quoted(text);
  }
  out.port = *port;
  return out;
}

std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    unsigned v = 0;
    const auto hex = s.substr(i + 1, 2);
    const auto r = std::from_chars(hex.data(), hex.data() + hex.size(), v, 16);
    if (hex.size() != 2 || r.ptr != hex.data() + 2) return std::nullopt;
    out += static_cast<char>(v);
    i += 2;
  }
  return out;
}

std::string describe_regex_error(std::regex_constants::error_type code) {
  namespace rc = std::regex_constants;
  switch (code) {
    case rc::error_collate:
      return "invalid collating element";
    case rc::error_ctype:
      return "invalid character class";
    case rc::error_escape:
      return "invalid escape";
    case rc::error_backref:
      return "invalid back reference";
    case rc::error_brack:
      return "mismatched [ and ]";
    case rc::error_paren:
      return "mismatched ( and )";
    case rc::error_brace:
      return "mismatched { and }";
    case rc::error_badbrace:
      return "invalid range in { }";
    case rc::error_range:
      return "invalid character range";
    case rc::error_badrepeat:
      return "nothing to repeat before *, +, ? or {";
    case rc::error_complexity:  // libstdc++ polynomial mode: a back-reference
      return "back-references are not supported";
    case rc::error_stack:
    case rc::error_space:
      return "too complex";
    default:
      return "syntax error";
  }
}

// ---------------------------------------------------------------- YAML walking

int line_of(const YAML::Node& node) {
  const auto mark = node.Mark();
  return mark.is_null() ? 1 : mark.line + 1;
}

// A YAML node with where it is: its key path and the line to report.
struct Field {
  YAML::Node node;
  std::string path;
  int line = 1;
  // Holds API keys: messages never show its values (nor its keys: a consumer
  // written as a mapping would have the API key as a key).
  bool secret = false;
};

struct Entry {
  std::string key;
  Field value;
};

struct Mapping {
  Field self;
  std::vector<Entry> entries;  // in file order, duplicates removed
  bool merged = false;         // had a "<<" merge key: missing keys are not reported

  const Field* get(std::string_view key) const {
    for (const auto& e : entries) {
      if (e.key == key) return &e.value;
    }
    return nullptr;
  }
};

std::string child_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

std::string index_path(const std::string& parent, std::size_t i) {
  return parent + "[" + std::to_string(i) + "]";
}

class Parser {
 public:
  Parser(std::string_view source, EnvLookup env) : source_(source), env_(std::move(env)) {}

  void error(int line, std::string_view path, std::string_view message) {
    std::string text = source_ + ":" + std::to_string(line) + ": ";
    text += path.empty() ? std::string_view("(root)") : path;
    text += ": ";
    text += message;
    errors_.push_back({line, std::move(text)});
  }
  void error(const Field& f, std::string_view message) { error(f.line, f.path, message); }

  void warning(const Field& f, std::string_view message) {
    warnings_.push_back(source_ + ":" + std::to_string(f.line) + ": " + f.path + ": " +
                        std::string(message));
  }
  std::vector<std::string> take_warnings() { return std::move(warnings_); }

  bool has_errors() const { return !errors_.empty(); }

  // Every error, in file order (stable for errors on the same line).
  std::vector<std::string> take_errors() {
    std::stable_sort(errors_.begin(), errors_.end(),
                     [](const Error& a, const Error& b) { return a.line < b.line; });
    std::vector<std::string> out;
    for (auto& e : errors_) out.push_back(std::move(e.text));
    return out;
  }

  // A mapping whose keys must be among `allowed`; or, with `allowed` empty,
  // a mapping of user-chosen names. Duplicate keys are errors.
  std::optional<Mapping> mapping(const Field& f, std::span<const std::string_view> allowed) {
    if (!f.node.IsMap()) {
      error(f, "expected a mapping" + got_kind(f));
      return std::nullopt;
    }
    Mapping m{f, {}};
    std::vector<int> first_lines;
    for (auto it = f.node.begin(); it != f.node.end(); ++it) {
      const YAML::Node key_node = it->first;
      const int key_line = line_of(key_node);
      if (!key_node.IsScalar()) {
        error(key_line, f.path, "keys must be strings");
        continue;
      }
      const std::string key = key_node.Scalar();
      // yaml-cpp 0.7 reads "<<: *anchor" as an ordinary key whose value is the
      // anchored mapping; it does not merge. A plain "<<" (tag "?") is refused
      // once, and the keys it would have brought are not reported missing.
      if (key == "<<" && key_node.Tag() == "?") {
        error(key_line, f.path,
              "YAML merge keys (\"<<\") are not supported: write the keys out (an alias of a "
              "whole value, \"key: *anchor\", works)");
        m.merged = true;
        continue;
      }
      if (f.secret && !allowed.empty() &&
          std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        error(key_line, f.path, "unknown key (not shown: this section holds API keys)");
        continue;
      }
      const std::string path = child_path(f.path, key);
      if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        error(key_line, path, "unknown key " + quoted(key));
        continue;
      }
      const auto dup = std::find_if(m.entries.begin(), m.entries.end(),
                                    [&](const Entry& e) { return e.key == key; });
      if (dup != m.entries.end()) {
        error(key_line, path,
              "duplicate key " + quoted(key) + " (first at line " +
                  std::to_string(first_lines[dup - m.entries.begin()]) + ")");
        continue;
      }
      first_lines.push_back(key_line);
      // Report at the key's line: a null or block value carries the line after it.
      m.entries.push_back({key, Field{it->second, path, key_line, f.secret}});
    }
    return m;
  }
  std::optional<Mapping> mapping(const Field& f, const Section& section) {
    return mapping(f, section.keys);
  }
  std::optional<Mapping> named_mapping(const Field& f) {
    return mapping(f, std::span<const std::string_view>{});
  }

  const Field* required(const Mapping& m, std::string_view key) {
    const Field* f = m.get(key);
    if (!f && !m.merged) error(m.self, "missing required key " + quoted(key));
    return f;
  }

  std::optional<std::vector<Field>> list(const Field& f) {
    if (!f.node.IsSequence()) {
      error(f, "expected a list" + got_kind(f));
      return std::nullopt;
    }
    std::vector<Field> items;
    std::size_t i = 0;
    for (auto it = f.node.begin(); it != f.node.end(); ++it, ++i) {
      const YAML::Node item = *it;
      // A null item carries no useful mark; use the list's line then.
      items.push_back(
          {item, index_path(f.path, i), item.IsNull() ? f.line : line_of(item), f.secret});
    }
    return items;
  }

  // ", got VALUE" for a message about a scalar, VALUE as read (after
  // environment expansion); nothing for a secret.
  static std::string got(const Field& f, std::string_view text) {
    return f.secret ? std::string() : ", got " + quoted(text);
  }
  // The same for a number that was read: shown without quotes.
  static std::string got_number(const Field& f, std::string_view text) {
    return f.secret ? std::string() : ", got " + std::string(text);
  }
  // ", got a list" etc. for a value of the wrong kind; a scalar as written.
  static std::string got_kind(const Field& f) {
    if (f.node.IsSequence()) return ", got a list";
    if (f.node.IsMap()) return ", got a mapping";
    if (f.node.IsNull()) return ", got null";
    return got(f, f.node.Scalar());
  }

  // The text of a scalar value, environment variables expanded; nullopt (with
  // the error reported) when it is not a scalar or cannot be expanded.
  std::optional<std::string> scalar(const Field& f, std::string_view expected) {
    if (!f.node.IsScalar()) {
      error(f, std::string(expected) + got_kind(f));
      return std::nullopt;
    }
    auto expansion = expand_env(f.node.Scalar(), env_);
    if (!expansion.error.empty()) {
      error(f, expansion.error);
      return std::nullopt;
    }
    return std::move(expansion.text);
  }

  std::optional<std::string> string(const Field& f) { return scalar(f, "expected a string"); }

  // A string that must not be empty.
  std::optional<std::string> nonempty_string(const Field& f) {
    auto s = string(f);
    if (s && s->empty()) {
      error(f, "must not be empty");
      return std::nullopt;
    }
    return s;
  }

  std::optional<std::int64_t> integer(const Field& f, std::int64_t min, std::int64_t max) {
    const auto text = scalar(f, "expected an integer");
    if (!text) return std::nullopt;
    const std::string& s = *text;
    std::int64_t v = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ptr != s.data() + s.size() || s.empty()) {
      error(f, "expected an integer" + got(f, s));
      return std::nullopt;
    }
    const std::string too_small = min == 1 ? "must be greater than 0" : "must not be negative";
    if (r.ec == std::errc::result_out_of_range && s.front() == '-') {
      error(f, too_small + got_number(f, s));
      return std::nullopt;
    }
    if (r.ec == std::errc::result_out_of_range || v > max) {
      error(f, "must be at most " + std::to_string(max) + got_number(f, s));
      return std::nullopt;
    }
    if (v < min) {
      error(f, too_small + got_number(f, s));
      return std::nullopt;
    }
    return v;
  }

  std::optional<Millis> duration(const Field& f) {
    const auto v = integer(f, 1, kMaxDurationMs);
    if (!v) return std::nullopt;
    return Millis(*v);
  }

  // A finite number greater than 0 (fractions allowed).
  std::optional<double> positive_number(const Field& f) {
    const auto text = scalar(f, "expected a number");
    if (!text) return std::nullopt;
    const std::string& s = *text;
    double v = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size() || !std::isfinite(v)) {
      error(f, "expected a number" + got(f, s));
      return std::nullopt;
    }
    if (v <= 0) {
      error(f, "must be greater than 0" + got_number(f, s));
      return std::nullopt;
    }
    return v;
  }

  std::optional<bool> boolean(const Field& f) {
    const auto s = scalar(f, "expected true or false");
    if (!s) return std::nullopt;
    if (*s == "true" || *s == "True" || *s == "TRUE") return true;
    if (*s == "false" || *s == "False" || *s == "FALSE") return false;
    error(f, "expected true or false" + got(f, *s));
    return std::nullopt;
  }

  std::optional<HostPort> address(const Field& f, bool listener) {
    const auto text = string(f);
    if (!text) return std::nullopt;
    auto parsed = parse_address(*text, listener);
    if (auto* message = std::get_if<std::string>(&parsed)) {
      error(f, *message);
      return std::nullopt;
    }
    return std::get<HostPort>(std::move(parsed));
  }

  std::optional<Cidr> cidr(const Field& f) {
    const auto text = string(f);
    if (!text) return std::nullopt;
    auto c = parse_cidr(*text);
    if (!c || text->find_first_of(" \t") != std::string::npos) {
      error(f, "invalid CIDR " + quoted(*text));
      return std::nullopt;
    }
    return c;
  }

  // A user-chosen name (a key of upstreams or limits, a route name).
  bool check_name(const Field& f, std::string_view name) {
    if (is_valid_name(name)) return true;
    error(f, "invalid name " + quoted(name) + ": use letters, digits, \"_\", \"-\" and \".\"");
    return false;
  }

 private:
  struct Error {
    int line;
    std::string text;
  };
  std::string source_;
  EnvLookup env_;
  std::vector<Error> errors_;
  std::vector<std::string> warnings_;
};

// ---------------------------------------------------------------- sections

class ConfigBuilder {
 public:
  ConfigBuilder(Parser& p, Config& c) : p_(p), c_(c) {}

  void root(const Field& f) {
    const auto m = p_.mapping(f, kRoot);
    if (!m) return;
    // Sections are read in dependency order; errors are sorted by line later.
    if (auto* s = m->get("server")) server(*s);
    if (auto* s = m->get("admin")) admin(*s);
    if (auto* s = m->get("log")) log(*s);
    if (auto* s = m->get("redis")) redis(*s);
    if (auto* s = p_.required(*m, "upstreams")) upstreams(*s);
    if (auto* s = m->get("limits")) {
      limits(*s);
    } else {
      limits_known_ = true;  // no limits at all: every reference is unknown
    }
    if (auto* s = m->get("api_keys")) api_keys(*s);
    check_plan_names();
    if (auto* s = p_.required(*m, "routes")) routes(*s);
    if (!p_.has_errors()) warn_method_bypasses();
  }

 private:
  void server(const Field& f) {
    const auto m = p_.mapping(f, kServer);
    if (!m) return;
    auto& s = c_.server;
    if (auto* v = m->get("listen")) {
      auto a = p_.address(*v, true);
      if (a) s.listen = *a;
      server_listen_ok_ = a.has_value();
    }
    if (auto* v = m->get("threads")) {
      if (auto n = p_.integer(*v, 0, kMaxThreads)) s.threads = static_cast<unsigned>(*n);
    }
    if (auto* v = m->get("max_header_bytes")) {
      // One header line must fit the 16-bit sizes of the HTTP parser's field table.
      if (auto n = p_.integer(*v, 1, kMaxHeaderBytes)) {
        s.max_header_bytes = static_cast<std::size_t>(*n);
      }
    }
    if (auto* v = m->get("max_body_bytes")) {
      const std::int64_t max = std::numeric_limits<std::int64_t>::max();
      if (auto n = p_.integer(*v, 1, max)) s.max_body_bytes = static_cast<std::uint64_t>(*n);
    }
    if (auto* v = m->get("header_timeout_ms")) {
      if (auto d = p_.duration(*v)) s.header_timeout = *d;
    }
    if (auto* v = m->get("idle_timeout_ms")) {
      if (auto d = p_.duration(*v)) s.idle_timeout = *d;
    }
    if (auto* v = m->get("drain_timeout_ms")) {
      if (auto d = p_.duration(*v)) s.drain_timeout = *d;
    }
    if (auto* v = m->get("body_timeout_ms")) {
      if (auto d = p_.duration(*v)) s.body_timeout = *d;
    }
    if (auto* v = m->get("send_timeout_ms")) {
      if (auto d = p_.duration(*v)) s.send_timeout = *d;
    }
    if (auto* v = m->get("max_connections")) {
      if (auto n = p_.integer(*v, 1, kMaxCount)) s.max_connections = static_cast<std::size_t>(*n);
    }
    if (auto* v = m->get("headers_with_underscores")) {
      if (auto text = p_.string(*v)) {
        if (*text == "drop") {
          s.headers_with_underscores = ServerConfig::Underscores::kDrop;
        } else if (*text == "allow") {
          s.headers_with_underscores = ServerConfig::Underscores::kAllow;
        } else if (*text == "reject") {
          s.headers_with_underscores = ServerConfig::Underscores::kReject;
        } else {
          p_.error(*v, "expected drop, allow or reject, got " + quoted(*text));
        }
      }
    }
    if (auto* v = m->get("trusted_proxies")) {
      s.trusted_proxies.clear();  // present (even empty) replaces the default
      if (auto items = p_.list(*v)) {
        for (const auto& item : *items) {
          if (auto c = p_.cidr(item)) s.trusted_proxies.push_back(*c);
        }
      }
    }
  }

  void admin(const Field& f) {
    const auto m = p_.mapping(f, kAdmin);
    if (!m) return;
    if (auto* v = m->get("listen")) {
      if (auto a = p_.address(*v, true)) {
        c_.admin.listen = *a;
        // Two listeners cannot share a port on overlapping addresses.
        const auto& s = c_.server.listen;
        const auto wildcard = [](const std::string& h) { return h == "0.0.0.0" || h == "::"; };
        if (server_listen_ok_ && a->port != 0 && a->port == s.port &&
            (a->host == s.host || wildcard(a->host) || wildcard(s.host))) {
          p_.error(*v, "conflicts with server.listen " + quoted(s.to_string()));
        }
      }
    }
  }

  void log(const Field& f) {
    const auto m = p_.mapping(f, kLog);
    if (!m) return;
    if (auto* v = m->get("level")) {
      if (auto level = p_.string(*v)) {
        constexpr std::string_view kLevels[] = {"trace", "debug", "info", "warn", "error"};
        if (std::find(std::begin(kLevels), std::end(kLevels), *level) == std::end(kLevels)) {
          p_.error(*v, "unknown log level " + quoted(*level) +
                           " (expected trace, debug, info, warn or error)");
        } else {
          c_.log.level = *level;
        }
      }
    }
    if (auto* v = m->get("access_log")) {
      if (auto b = p_.boolean(*v)) c_.log.access_log = *b;
    }
  }

  void redis(const Field& f) {
    const auto m = p_.mapping(f, kRedis);
    if (!m) return;
    auto& r = c_.redis;
    bool url_ok = true;
    if (const Field* given = m->get("url")) {
      url_ok = false;
      Field url_field = *given;
      url_field.secret = true;  // may carry a password: shown only redacted
      const Field* v = &url_field;
      if (auto url = p_.string(*v)) {
        if (auto message = parse_redis_url(*url, r)) {
          p_.error(*v, "invalid url: " + *message + ", got " + quoted(redact_url(*url)));
        } else {
          r.url = *url;
          url_ok = true;
        }
      }
    }
    if (auto* v = m->get("timeout_ms")) {
      if (auto d = p_.duration(*v)) r.timeout = *d;
    }
    if (auto* v = m->get("connect_timeout_ms")) {
      if (auto d = p_.duration(*v)) r.connect_timeout = *d;
    }
    if (auto* v = m->get("key_prefix")) {
      if (auto s = p_.string(*v)) r.key_prefix = *s;
    }
    if (auto* v = m->get("circuit_breaker")) {
      if (const auto cb = p_.mapping(*v, kCircuitBreaker)) {
        if (auto* w = cb->get("failures")) {
          if (auto n = p_.integer(*w, 1, kMaxCount)) {
            r.circuit_breaker.failures = static_cast<unsigned>(*n);
          }
        }
        if (auto* w = cb->get("open_ms")) {
          if (auto d = p_.duration(*w)) r.circuit_breaker.open = *d;
        }
      }
    }
    const std::pair<std::string_view, std::string*> tls_keys[] = {
        {"tls_ca_file", &r.tls_ca_file},
        {"tls_cert_file", &r.tls_cert_file},
        {"tls_key_file", &r.tls_key_file},
        {"tls_server_name", &r.tls_server_name}};
    for (const auto& [key, target] : tls_keys) {
      const Field* v = m->get(key);
      if (!v) continue;
      if (auto s = p_.string(*v)) *target = *s;
      if (url_ok && !r.tls) p_.error(*v, "only valid with a rediss:// url");
    }
    // A client certificate needs its key and the other way round.
    const Field* cert = m->get("tls_cert_file");
    const Field* key = m->get("tls_key_file");
    if (cert && !key) p_.error(*cert, "requires redis.tls_key_file");
    if (key && !cert) p_.error(*key, "requires redis.tls_cert_file");
    if (r.tls && r.tls_server_name.empty()) r.tls_server_name = r.host;
  }

  void upstreams(const Field& f) {
    const auto m = p_.named_mapping(f);
    if (!m) return;
    upstreams_known_ = true;
    for (const auto& [name, value] : m->entries) {
      UpstreamConfig u;
      u.name = name;
      p_.check_name(value, name);
      upstream(value, u);
      c_.upstreams.push_back(std::move(u));  // kept even if invalid, so routes resolve
    }
  }

  void upstream(const Field& f, UpstreamConfig& u) {
    const auto m = p_.mapping(f, kUpstream);
    if (!m) return;
    if (auto* v = p_.required(*m, "servers")) {
      if (auto items = p_.list(*v)) {
        if (items->empty()) p_.error(*v, "must list at least one server");
        for (const auto& item : *items) {
          if (auto a = p_.address(item, false)) u.servers.push_back(*a);
        }
      }
    }
    if (auto* v = m->get("connect_timeout_ms")) {
      if (auto d = p_.duration(*v)) u.connect_timeout = *d;
    }
    if (auto* v = m->get("response_timeout_ms")) {
      if (auto d = p_.duration(*v)) u.response_timeout = *d;
    }
    if (auto* v = m->get("max_idle_connections")) {
      // 0 is allowed: no keep-alive pool.
      if (auto n = p_.integer(*v, 0, kMaxCount)) u.max_idle_connections = *n;
    }
    if (auto* v = m->get("fail_cooldown_ms")) {
      if (auto d = p_.duration(*v)) u.fail_cooldown = *d;
    }
    if (auto* v = m->get("max_connections")) {
      // 0 is allowed: no limit.
      if (auto n = p_.integer(*v, 0, kMaxCount)) u.max_connections = *n;
    }
  }

  void limits(const Field& f) {
    const auto m = p_.named_mapping(f);
    if (!m) return;
    limits_known_ = true;
    for (const auto& [name, value] : m->entries) {
      LimitConfig l;
      l.name = name;
      p_.check_name(value, name);
      limit(value, l);
      c_.limits.push_back(std::move(l));  // kept even if invalid, so routes resolve
      limit_valid_.push_back(!limit_failed_);
    }
  }

  void limit(const Field& f, LimitConfig& l) {
    limit_failed_ = true;
    const auto m = p_.mapping(f, kLimit);
    if (!m) return;
    bool ok = true;
    if (auto* v = p_.required(*m, "key")) ok = key_sources(*v, l.key) && ok;
    if (auto* v = p_.required(*m, "capacity")) {
      auto n = p_.positive_number(*v);
      ok = n && ok;
      if (n) l.bucket.capacity = *n;
    } else {
      ok = false;
    }
    if (auto* v = p_.required(*m, "refill_per_second")) {
      auto n = p_.positive_number(*v);
      ok = n && ok;
      if (n) l.bucket.refill_per_second = *n;
    } else {
      ok = false;
    }
    if (auto* v = m->get("plans")) {
      if (const auto plans = p_.named_mapping(*v)) {
        for (const auto& [plan, value] : plans->entries) {
          if (plan.empty()) p_.error(value, "plan name must not be empty");
          plan_overrides_.push_back({plan, value});
          // A plan overrides capacity, refill or both; the rest is inherited.
          BucketParams params = l.bucket;
          const auto pm = p_.mapping(value, kPlan);
          if (!pm) {
            ok = false;
            continue;
          }
          if (auto* w = pm->get("capacity")) {
            auto n = p_.positive_number(*w);
            ok = n && ok;
            if (n) params.capacity = *n;
          }
          if (auto* w = pm->get("refill_per_second")) {
            auto n = p_.positive_number(*w);
            ok = n && ok;
            if (n) params.refill_per_second = *n;
          }
          l.plans[plan] = params;
        }
      } else {
        ok = false;
      }
    }
    limit_failed_ = !ok;
  }

  // "ip", "header:X-Tenant", or a non-empty list of those.
  bool key_sources(const Field& f, std::vector<KeySource>& out) {
    if (f.node.IsScalar()) {
      auto s = key_source(f);
      if (s) out.push_back(*s);
      return s.has_value();
    }
    if (!f.node.IsSequence()) {
      p_.error(f, "expected a key source or a list of them" + Parser::got_kind(f));
      return false;
    }
    const auto items = p_.list(f);
    if (items->empty()) {
      p_.error(f, "must list at least one key source");
      return false;
    }
    bool ok = true;
    for (const auto& item : *items) {
      auto s = key_source(item);
      if (s) out.push_back(*s);
      ok = s && ok;
    }
    return ok;
  }

  std::optional<KeySource> key_source(const Field& f) {
    const auto text = p_.string(f);
    if (!text) return std::nullopt;
    using Kind = KeySource::Kind;
    static const std::pair<std::string_view, Kind> kPlain[] = {{"api_key", Kind::kApiKey},
                                                               {"ip", Kind::kIp},
                                                               {"path", Kind::kPath},
                                                               {"route", Kind::kRoute},
                                                               {"global", Kind::kGlobal}};
    for (const auto& [word, kind] : kPlain) {
      if (*text == word) return KeySource{kind, {}};
    }
    const std::string_view t = *text;
    if (t.starts_with("header:")) {
      const auto name = t.substr(7);
      if (!is_token(name)) {
        p_.error(f, "invalid header name " + quoted(name) + " in " + quoted(t));
        return std::nullopt;
      }
      warn_if_underscores_hide(f, name);
      return KeySource{Kind::kHeader, std::string(name)};
    }
    if (t.starts_with("query:")) {
      const auto name = t.substr(6);
      if (name.empty()) {
        p_.error(f, "missing parameter name in " + quoted(t));
        return std::nullopt;
      }
      return KeySource{Kind::kQuery, std::string(name)};
    }
    p_.error(f, "unknown key source " + quoted(t) +
                    " (expected api_key, ip, path, route, global, header:NAME or query:NAME)");
    return std::nullopt;
  }

  void api_keys(const Field& f) {
    const auto m = p_.mapping(f, kApiKeys);
    if (!m) {
      api_keys_known_ = false;  // plans cannot be checked against it
      return;
    }
    auto& a = c_.api_keys;
    if (auto* v = m->get("header")) {
      if (auto s = p_.nonempty_string(*v)) {
        if (is_token(*s)) {
          a.header = *s;
          warn_if_underscores_hide(*v, *s);
        } else {
          p_.error(*v, "invalid header name " + quoted(*s));
        }
      }
    }
    if (auto* v = m->get("default_plan")) {
      if (auto s = p_.nonempty_string(*v)) {
        a.default_plan = *s;
      } else {
        api_keys_known_ = false;
      }
    }
    if (const Field* given = m->get("consumers")) {
      Field consumers = *given;
      consumers.secret = true;  // API keys: never shown, down to the items' keys
      const auto items = p_.list(consumers);
      if (!items) {
        api_keys_known_ = false;
        return;
      }
      std::unordered_map<std::string, int> first_line;
      for (const auto& item : *items) {
        const auto cm = p_.mapping(item, kConsumer);
        if (!cm) continue;
        Consumer consumer;
        const Field* key = p_.required(*cm, "key");
        const Field* plan = p_.required(*cm, "plan");
        if (plan) {
          Field plan_field = *plan;
          plan_field.secret = false;  // a plan name is not a secret
          if (auto s = p_.nonempty_string(plan_field)) {
            consumer.plan = *s;
            consumer_plans_.insert(*s);
          }
        }
        if (!key) continue;
        // The key itself never appears in a message: errors are logged.
        auto s = p_.nonempty_string(*key);
        if (!s) continue;
        if (s->size() > kMaxConsumerKeyBytes) {
          p_.error(*key, "longer than " + std::to_string(kMaxConsumerKeyBytes) + " bytes");
          continue;
        }
        if (std::any_of(s->begin(), s->end(),
                        [](char c) { return static_cast<unsigned char>(c) <= ' ' || c == 0x7f; })) {
          p_.error(*key, "must not contain spaces or control characters");
          continue;
        }
        const auto [it, inserted] = first_line.emplace(*s, key->line);
        if (!inserted) {
          p_.error(*key,
                   "duplicate consumer key (first at line " + std::to_string(it->second) + ")");
          continue;
        }
        consumer.key = *s;
        a.plan_by_key[consumer.key] = consumer.plan;
        a.consumers.push_back(std::move(consumer));
      }
    }
  }

  void routes(const Field& f) {
    const auto items = p_.list(f);
    if (!items) return;
    std::unordered_map<std::string, int> first_line;
    for (const auto& item : *items) {
      RouteConfig r;
      route_fields_.push_back(item);  // replaced by match.methods when the route has them
      route(item, r, first_line);
      c_.routes.push_back(std::move(r));
    }
  }

  void route(const Field& f, RouteConfig& r, std::unordered_map<std::string, int>& first_line) {
    const auto m = p_.mapping(f, kRoute);
    path_key_.reset();
    if (!m) return;
    if (auto* v = p_.required(*m, "name")) {
      if (auto s = p_.string(*v); s && p_.check_name(*v, *s)) {
        const auto [it, inserted] = first_line.emplace(*s, v->line);
        if (!inserted) {
          p_.error(*v, "duplicate route name " + quoted(*s) + " (first at line " +
                           std::to_string(it->second) + ")");
        }
        r.name = *s;
      }
    }
    if (auto* v = p_.required(*m, "match")) route_match(*v, r.match);
    if (auto* v = p_.required(*m, "upstream")) {
      if (auto s = p_.string(*v)) {
        r.upstream = *s;
        const auto it = std::find_if(c_.upstreams.begin(), c_.upstreams.end(),
                                     [&](const UpstreamConfig& u) { return u.name == *s; });
        if (it != c_.upstreams.end()) {
          r.upstream_index = static_cast<std::size_t>(it - c_.upstreams.begin());
        } else if (upstreams_known_) {
          p_.error(*v, "unknown upstream " + quoted(*s));
        }
      }
    }
    if (auto* v = m->get("strip_prefix")) {
      if (auto b = p_.boolean(*v)) {
        r.strip_prefix = *b;
        if (*b && path_key_ && *path_key_ != "path_prefix") {
          p_.error(*v, "only valid with match.path_prefix");
        }
      }
    }
    std::optional<double> cost;
    if (auto* v = m->get("cost")) {
      cost = p_.positive_number(*v);
      if (cost) r.cost = *cost;
    }
    if (auto* v = m->get("limits")) {
      if (auto items = p_.list(*v)) route_limits(*items, r);
      warn_if_keys_mint_buckets(*v, r);
    }
    if (auto* v = m->get("on_redis_failure")) {
      if (auto s = p_.string(*v)) {
        if (*s == "open") {
          r.on_redis_failure = FailureMode::kOpen;
        } else if (*s == "closed") {
          r.on_redis_failure = FailureMode::kClosed;
        } else {
          p_.error(*v, "expected open or closed, got " + quoted(*s));
        }
      }
    }
    // A request that costs more than a bucket holds would be denied forever.
    if (const Field* v = m->get("cost"); v && cost) {
      for (std::size_t i : r.limit_indexes) {
        if (!limit_valid_[i]) continue;
        const auto& l = c_.limits[i];
        if (*cost > l.bucket.capacity) {
          p_.error(*v, "cost " + format_number(*cost) + " is more than the capacity " +
                           format_number(l.bucket.capacity) + " of limit " + quoted(l.name));
        }
        for (const auto& [plan, params] : l.plans) {
          if (*cost > params.capacity) {
            p_.error(*v, "cost " + format_number(*cost) + " is more than the capacity " +
                             format_number(params.capacity) + " of limit " + quoted(l.name) +
                             " plan " + quoted(plan));
          }
        }
      }
    }
  }

  // A plan override applies only to a plan some key can have: the default plan
  // or a consumer's. Any other name is a typo that would silently give those
  // customers the base limits.
  void check_plan_names() {
    if (!api_keys_known_ || plan_overrides_.empty()) return;
    std::set<std::string> known = consumer_plans_;
    known.insert(c_.api_keys.default_plan);
    std::string list;
    for (const auto& name : known) list += (list.empty() ? "" : ", ") + name;
    for (const auto& [plan, field] : plan_overrides_) {
      if (plan.empty() || known.count(plan)) continue;
      p_.error(field, "unknown plan " + quoted(plan) +
                          ": not api_keys.default_plan nor the plan of a consumer (known: " + list +
                          ")");
    }
  }

  // Routes fall through on a method they do not list. When the route they fall
  // to takes any method on the same paths and has no limits, listing methods
  // turned the limits into a choice of the client.
  void warn_method_bypasses() {
    for (const auto& bypass : find_method_bypasses(c_)) {
      const auto& limited = route_fields_[bypass.limited];
      const auto& later = c_.routes[bypass.unlimited];
      const std::string later_path = index_path("routes", bypass.unlimited);
      p_.warning(limited,
                 "requests with a method not listed here (TRACE, PURGE, a lower-case \"get\"...) "
                 "fall through to " +
                     later_path + " (" + quoted(later.name) +
                     "), which matches the same paths with no limits, so they bypass the "
                     "limits of this route; give " +
                     later_path + " limits, or drop methods here to limit every method");
    }
  }

  // A header named with "_" never reaches the limiter unless
  // server.headers_with_underscores is allow (read before limits and api_keys).
  void warn_if_underscores_hide(const Field& f, std::string_view header) {
    using Underscores = ServerConfig::Underscores;
    const auto policy = c_.server.headers_with_underscores;
    if (header.find('_') == std::string_view::npos || policy == Underscores::kAllow) return;
    p_.warning(f, "header " + quoted(header) + " has \"_\" in its name, and "
                      "server.headers_with_underscores is " +
                      (policy == Underscores::kDrop ? "drop: the header is removed before "
                                                      "the limiter sees it"
                                                    : "reject: requests with it get 400") +
                      "; rename it or set headers_with_underscores: allow");
  }

  // With no consumers listed every API key is its own bucket, so a route whose
  // every limit is keyed by the API key never denies a client that sends a new
  // random key each time. A limit without api_key in its key (ip, global...) bounds it.
  void warn_if_keys_mint_buckets(const Field& f, const RouteConfig& r) {
    if (r.limit_indexes.empty() || !c_.api_keys.consumers.empty()) return;
    for (std::size_t i : r.limit_indexes) {
      const auto& key = c_.limits[i].key;
      const bool keyed_by_api_key = std::any_of(key.begin(), key.end(), [](const KeySource& k) {
        return k.kind == KeySource::Kind::kApiKey;
      });
      if (!keyed_by_api_key) return;
    }
    p_.warning(f,
               "every limit is keyed by api_key and api_keys.consumers is empty: each new key "
               "gets a fresh bucket, so random keys are never denied; add a limit keyed by ip "
               "beside them or list the consumers");
  }

  void route_limits(const std::vector<Field>& items, RouteConfig& r) {
    for (const auto& item : items) {
      const auto name = p_.string(item);
      if (!name) continue;
      if (std::find(r.limits.begin(), r.limits.end(), *name) != r.limits.end()) {
        p_.error(item, "limit " + quoted(*name) + " is listed twice");
        continue;
      }
      const auto it = std::find_if(c_.limits.begin(), c_.limits.end(),
                                   [&](const LimitConfig& l) { return l.name == *name; });
      if (it == c_.limits.end()) {
        if (limits_known_) p_.error(item, "unknown limit " + quoted(*name));
        continue;
      }
      r.limits.push_back(*name);
      r.limit_indexes.push_back(static_cast<std::size_t>(it - c_.limits.begin()));
    }
  }

  void route_match(const Field& f, RouteMatch& match) {
    path_key_.reset();
    const auto m = p_.mapping(f, kMatch);
    if (!m) return;
    // Exactly one of the path keys, in file order.
    const Field* path = nullptr;
    for (const auto& e : m->entries) {
      if (e.key != "path_prefix" && e.key != "path_exact" && e.key != "path_regex") continue;
      if (path) {
        p_.error(e.value.line, f.path, "only one of " + std::string(kPathKeys) + " is allowed");
        continue;
      }
      path = &e.value;
      path_key_ = e.key;
    }
    if (!path) {
      p_.error(f, "missing one of " + std::string(kPathKeys));
    } else if (auto s = p_.string(*path)) {
      match.path = *s;
      if (*path_key_ == "path_regex") {
        match.path_kind = RouteMatch::PathKind::kRegex;
        try {
          match.regex = std::make_shared<const std::regex>(*s, kRegexFlags);
        } catch (const std::regex_error& e) {
          p_.error(*path, "invalid regular expression: " + describe_regex_error(e.code()) + " in " +
                              quoted(*s));
        }
      } else {
        match.path_kind = *path_key_ == "path_prefix" ? RouteMatch::PathKind::kPrefix
                                                      : RouteMatch::PathKind::kExact;
        if (!s->starts_with('/')) {
          p_.error(*path, "must start with \"/\", got " + quoted(*s));
        } else if (s->find('?') != std::string::npos) {
          p_.error(*path, "must be a path without a query, got " + quoted(*s));
        } else {
          // Requests are routed on their normalized path, so a path written
          // otherwise would never match.
          NormalizedTarget normalized;
          if (const auto why = normalize_target(*s, normalized); !why.empty()) {
            p_.error(*path, "invalid path " + quoted(*s) + ": " + std::string(why));
          } else if (normalized.route_path != *s) {
            p_.error(*path, "requests are matched on their normalized path: write " +
                                quoted(normalized.route_path) + " instead of " + quoted(*s));
          }
        }
      }
    }
    if (auto* v = m->get("methods")) {
      if (!route_fields_.empty()) route_fields_.back() = *v;
      if (auto items = p_.list(*v)) {
        if (items->empty()) {
          p_.error(*v, "must list at least one method (omit the key to allow any method)");
        }
        for (const auto& item : *items) {
          auto s = p_.string(item);
          if (!s) continue;
          if (!is_token(*s)) {
            p_.error(item, "invalid method " + quoted(*s));
            continue;
          }
          std::transform(s->begin(), s->end(), s->begin(), to_upper);
          if (std::find(match.methods.begin(), match.methods.end(), *s) == match.methods.end()) {
            match.methods.push_back(*s);
          }
        }
      }
    }
    if (auto* v = m->get("host")) {
      if (auto s = p_.nonempty_string(*v)) {
        std::string host = *s;
        std::transform(host.begin(), host.end(), host.begin(), to_lower);
        if (host.size() > 1 && host.back() == '.') host.pop_back();
        const bool bracketed =
            host.front() == '[' && host.back() == ']' &&
            is_ip_literal(std::string_view(host).substr(1, host.size() - 2), AF_INET6);
        if (!bracketed && host.find(':') != std::string::npos) {
          p_.error(*v, "must be a host name without a port, got " + quoted(*s));
        } else if (!bracketed && !is_host_name(host)) {
          p_.error(*v, "invalid host " + quoted(*s));
        } else {
          match.host = host;
        }
      }
    }
  }

  Parser& p_;
  Config& c_;
  bool server_listen_ok_ = true;  // false when server.listen is given but invalid
  bool upstreams_known_ = false;  // false when the section is broken: skip "unknown upstream"
  bool limits_known_ = false;
  bool limit_failed_ = false;
  std::vector<bool> limit_valid_;        // per Config::limits entry
  std::optional<std::string> path_key_;  // path key of the route being read
  bool api_keys_known_ = true;           // false when api_keys is broken: skip plan checks
  std::set<std::string> consumer_plans_;
  struct PlanOverride {
    std::string plan;
    Field field;
  };
  std::vector<PlanOverride> plan_overrides_;  // every limits.NAME.plans entry
  std::vector<Field> route_fields_;           // per route: its match.methods, else the item
};

// Counts documents without building them, stopping at the second one: the
// line where it starts, or 0 when there is only one. (YAML::LoadAll is not
// used: yaml-cpp 0.7 loops forever on some inputs, e.g. a leading ",".)
class DocumentCounter : public YAML::EventHandler {
 public:
  int documents = 0;
  int second_line = 0;
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents == 2) second_line = mark.line + 1;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

int second_document_line(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentCounter counter;
  while (counter.documents < 2 && parser.HandleNextDocument(counter)) {
  }
  return counter.second_line;
}

}  // namespace

const BucketParams& LimitConfig::for_plan(std::string_view plan) const {
  const auto it = plans.find(std::string(plan));
  return it == plans.end() ? bucket : it->second;
}

const UpstreamConfig* Config::find_upstream(std::string_view name) const {
  const auto it = std::find_if(upstreams.begin(), upstreams.end(),
                               [&](const UpstreamConfig& u) { return u.name == name; });
  return it == upstreams.end() ? nullptr : &*it;
}

const LimitConfig* Config::find_limit(std::string_view name) const {
  const auto it = std::find_if(limits.begin(), limits.end(),
                               [&](const LimitConfig& l) { return l.name == name; });
  return it == limits.end() ? nullptr : &*it;
}

std::optional<std::string> parse_redis_url(std::string_view url, RedisConfig& out) {
  // Messages never quote the url: it may carry a password.
  bool tls = false;
  std::string_view rest;
  if (url.starts_with("redis://")) {
    rest = url.substr(8);
  } else if (url.starts_with("rediss://")) {
    tls = true;
    rest = url.substr(9);
  } else {
    return "must start with redis:// or rediss://";
  }
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return "must not have a query string or fragment";
  }
  const auto slash = rest.find('/');
  const auto authority = rest.substr(0, slash);
  const auto db_text =
      slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);

  // [[user]:password@] as in the IANA redis URI scheme: a lone word is a password.
  std::string user;
  std::string password;
  auto host_port = authority;
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
    const auto userinfo = authority.substr(0, at);
    host_port = authority.substr(at + 1);
    const auto colon = userinfo.find(':');
    auto u = percent_decode(colon == std::string_view::npos ? std::string_view{}
                                                            : userinfo.substr(0, colon));
    auto p =
        percent_decode(colon == std::string_view::npos ? userinfo : userinfo.substr(colon + 1));
    if (!u || !p) return "has an invalid percent-escape";
    user = std::move(*u);
    password = std::move(*p);
  }

  std::string_view host;
  std::string_view port_text;
  if (host_port.starts_with('[')) {
    const auto close = host_port.find(']');
    if (close == std::string_view::npos) return "has an invalid host";
    host = host_port.substr(1, close - 1);
    if (!is_ip_literal(host, AF_INET6)) return "has an invalid host";
    const auto after = host_port.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return "has an invalid host";
      port_text = after.substr(1);
      if (port_text.empty()) return "port must be between 1 and 65535";
    }
  } else {
    const auto colon = host_port.find(':');
    host = host_port.substr(0, colon);
    if (colon != std::string_view::npos) {
      port_text = host_port.substr(colon + 1);
      if (port_text.empty()) return "port must be between 1 and 65535";
    }
    if (!host.empty() && !is_host_name(host)) return "has an invalid host";
  }
  if (host.empty()) return "has no host";
  std::uint16_t port = kDefaultRedisPort;
  if (!port_text.empty()) {
    const auto p = parse_port(port_text, 1);
    if (!p) return "port must be between 1 and 65535";
    port = *p;
  }
  int db = 0;
  if (!db_text.empty()) {
    const auto r = std::from_chars(db_text.data(), db_text.data() + db_text.size(), db);
    if (!all_digits(db_text) || r.ec != std::errc() || r.ptr != db_text.data() + db_text.size()) {
      return "database must be a non-negative integer";
    }
  }
  out.tls = tls;
  out.host = std::string(host);
  out.port = port;
  out.user = std::move(user);
  out.password = std::move(password);
  out.db = db;
  return std::nullopt;
}

namespace {

// The first line, up to `last_line`, whose indentation holds a tab (0 if none).
// YAML forbids tabs there, and yaml-cpp then reports an unrelated-sounding
// "illegal map value" or "end of map not found".
int tab_indented_line(std::string_view text, int last_line) {
  int line = 1;
  std::size_t start = 0;
  while (start <= text.size() && line <= last_line) {
    const auto end = std::min(text.find('\n', start), text.size());
    const auto content = text.substr(start, end - start);
    const auto first = content.find_first_not_of(" \t");
    // Tabs before the first character of a line with content.
    if (first != std::string_view::npos && content.substr(0, first).find('\t') != content.npos) {
      return line;
    }
    start = end + 1;
    ++line;
  }
  return 0;
}

}  // namespace

std::vector<std::string> config_key_paths() {
  std::vector<std::string> out;
  for (const Section* section : kSections) {
    for (const auto key : section->keys) {
      out.push_back(section->path.empty() ? std::string(key)
                                          : std::string(section->path) + "." + std::string(key));
    }
  }
  return out;
}

ConfigResult parse_config(std::string_view yaml_text, std::string_view source) {
  return parse_config(yaml_text, source, process_environment());
}

ConfigResult parse_config(std::string_view yaml_text, std::string_view source,
                          const EnvLookup& env) {
  Parser parser(source, env);
  auto config = std::make_shared<Config>();
  config->source = std::string(source);
  try {
    const std::string text(yaml_text);
    const YAML::Node root = YAML::Load(text);
    const int extra_document_line = second_document_line(text);
    if (!root.IsMap()) {
      parser.error(line_of(root), "", "expected a mapping");
    } else if (extra_document_line > 0) {
      parser.error(extra_document_line, "", "expected a single YAML document");
    } else {
      ConfigBuilder builder(parser, *config);
      builder.root(Field{root, "", line_of(root)});
    }
  } catch (const YAML::ParserException& e) {
    // Syntax errors stop the parse; yaml-cpp reports only the first one.
    const int line = e.mark.is_null() ? 1 : e.mark.line + 1;
    if (const int tab_line = tab_indented_line(yaml_text, line)) {
      return {nullptr,
              {std::string(source) + ":" + std::to_string(tab_line) +
               ": syntax error: a tab in the indentation (YAML indents with spaces only)"},
              {}};
    }
    return {nullptr,
            {std::string(source) + ":" + std::to_string(line) + ": syntax error: " + e.msg},
            {}};
  } catch (const YAML::Exception& e) {
    parser.error(e.mark.is_null() ? 1 : e.mark.line + 1, "", e.msg);
  }
  if (parser.has_errors()) return {nullptr, parser.take_errors(), {}};
  return {std::move(config), {}, parser.take_warnings()};
}

ConfigResult load_config_file(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) return {nullptr, {path + ": cannot read file: " + std::strerror(errno)}, {}};
  std::string text;
  char buf[8192];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, file)) > 0) text.append(buf, n);
  const bool failed = std::ferror(file) != 0;
  const int err = errno;
  std::fclose(file);
  if (failed) return {nullptr, {path + ": cannot read file: " + std::strerror(err)}, {}};
  return parse_config(text, path);
}

}  // namespace sluice
