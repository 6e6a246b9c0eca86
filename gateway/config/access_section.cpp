// Who may reach a route and what a browser may read of it: ip_access (the
// top-level section and routes[].ip_access), routes[].cors, and the
// client_headers choice of limits and routes.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/ascii.hpp"
#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"
#include "gateway/config/values.hpp"

namespace sluice::config {
namespace {

constexpr std::size_t kMaxIpEntries = 1000000;         // per ip_access, lists and files together
constexpr std::size_t kMaxIpFileBytes = 64u << 20;     // one allow_file or deny_file
constexpr std::size_t kMaxFileErrorsShown = 5;         // per file; the rest are counted
constexpr std::int64_t kMaxCorsMaxAge = 86400;         // seconds; browsers cap lower anyway

using Verdict = IpPrefixTable::Verdict;

const char* verdict_word(Verdict v) { return v == Verdict::kAllow ? "allowed" : "denied"; }

// Adds one entry; a prefix listed on both sides is an error, a repeat is not.
class TableBuilder {
 public:
  TableBuilder(YamlReader& r, IpAccessConfig& out) : r_(r), out_(out) {}

  bool add(const Field& f, const Cidr& cidr, Verdict verdict, std::string_view where) {
    if (table_->size() >= kMaxIpEntries && !full_reported_) {
      full_reported_ = true;
      r_.error(f, "more than " + std::to_string(kMaxIpEntries) + " entries");
    }
    if (full_reported_) return false;
    const Verdict kept = table_->add(cidr, verdict);
    if (kept != verdict) {
      r_.error(f, std::string(where) + cidr.to_string() + " is both " + verdict_word(kept) +
                      " and " + verdict_word(verdict));
      return false;
    }
    (verdict == Verdict::kAllow ? out_.has_allow : out_.has_deny) = true;
    return true;
  }

  void finish() {
    if (!table_->empty()) out_.table = std::move(table_);
  }

 private:
  YamlReader& r_;
  IpAccessConfig& out_;
  std::shared_ptr<IpPrefixTable> table_ = std::make_shared<IpPrefixTable>();
  bool full_reported_ = false;
};

void read_ip_list(YamlReader& r, const Field& f, Verdict verdict, TableBuilder& table) {
  const auto items = r.list(f);
  if (!items) return;
  for (const auto& item : *items) {
    if (auto cidr = read_cidr(r, item)) table.add(item, *cidr, verdict, "");
  }
}

// One CIDR or address per line; blank lines and "#" comments are skipped.
void read_ip_file(YamlReader& r, const Field& f, Verdict verdict, TableBuilder& table) {
  const auto path = r.nonempty_string(f);
  if (!path) return;
  std::FILE* file = std::fopen(path->c_str(), "rb");
  if (!file) {
    r.error(f, "cannot read " + shown(*path) + ": " + std::strerror(errno));
    return;
  }
  std::string text;
  char buf[65536];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, file)) > 0 && text.size() <= kMaxIpFileBytes) {
    text.append(buf, n);
  }
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) return r.error(f, "cannot read " + shown(*path));
  if (text.size() > kMaxIpFileBytes) {
    return r.error(f, shown(*path) + " is larger than " + std::to_string(kMaxIpFileBytes >> 20) +
                          " MiB");
  }
  std::size_t bad = 0;
  std::size_t line_number = 0;
  std::string_view rest = text;
  while (!rest.empty()) {
    ++line_number;
    const auto end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    if (const auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = ascii::trim(line);
    if (line.empty()) continue;
    const std::string where = *path + ":" + std::to_string(line_number) + ": ";
    const auto cidr = parse_cidr(line);
    if (!cidr || line.find_first_of(" \t") != std::string_view::npos) {
      if (++bad <= kMaxFileErrorsShown) r.error(f, where + "invalid CIDR " + shown(line));
      continue;
    }
    if (!table.add(f, *cidr, verdict, where)) ++bad;
  }
  if (bad > kMaxFileErrorsShown) {
    r.error(f, shown(*path) + ": " + std::to_string(bad - kMaxFileErrorsShown) +
                   " more bad lines");
  }
}

// A comma-separated header value from a list of tokens, upper-cased or as written.
std::optional<std::string> read_token_list(YamlReader& r, const Field& f, bool upper,
                                           std::string_view what) {
  const auto items = r.list(f);
  if (!items) return std::nullopt;
  std::string joined;
  for (const auto& item : *items) {
    auto s = r.string(item);
    if (!s) continue;
    if (!is_token(*s)) {
      r.error(item, "invalid " + std::string(what) + " " + shown(*s));
      continue;
    }
    if (upper) ascii::to_upper_in_place(*s);
    if (!joined.empty()) joined += ", ";
    joined += *s;
  }
  return joined;
}

bool scheme_char(char c) {
  return ascii::is_alpha(c) || ascii::is_digit(c) || c == '+' || c == '-' || c == '.';
}

// "scheme://host[:port]" with nothing after it, as browsers send Origin.
void read_origin(YamlReader& r, const Field& f, CorsConfig& cors) {
  auto s = r.nonempty_string(f);
  if (!s) return;
  if (*s == "*") {
    cors.any_origin = true;
    return;
  }
  if (*s == "null") {
    return r.error(f, "the origin \"null\" is what sandboxed pages, files and redirects send; "
                      "any page can make it, so it cannot be allowed");
  }
  ascii::to_lower_in_place(*s);
  const auto scheme_end = s->find("://");
  const bool scheme_ok = scheme_end != std::string::npos && scheme_end > 0 &&
                         ascii::is_alpha((*s)[0]) &&
                         std::all_of(s->begin(), s->begin() + static_cast<long>(scheme_end),
                                     scheme_char);
  const std::string_view host =
      scheme_ok ? std::string_view(*s).substr(scheme_end + 3) : std::string_view{};
  if (!scheme_ok || host.empty() || host.find_first_of("/?#@ ") != std::string_view::npos) {
    return r.error(f, "expected an origin such as \"https://app.example.com\" or "
                      "\"https://*.example.com\", got " + shown(*s));
  }
  const auto star = host.find('*');
  if (star == std::string_view::npos) {
    cors.origins.push_back(*s);
    return;
  }
  if (star != 0 || host.size() < 3 || host[1] != '.' ||
      host.find('*', 1) != std::string_view::npos) {
    return r.error(f, "a wildcard origin is \"scheme://*.domain\" (one \"*\", first), got " +
                          shown(*s));
  }
  const auto domain = host.substr(2);
  if (domain.find('.') == std::string_view::npos || domain.back() == '.') {
    return r.error(f, "a wildcard must sit under a domain of two labels at least (\"*.example.com\"), "
                      "not a top-level one: got " + shown(*s));
  }
  cors.wildcards.push_back({s->substr(0, scheme_end + 3), std::string(host.substr(1))});
}

}  // namespace

void read_ip_access(YamlReader& r, const Field& f, IpAccessConfig& out) {
  const auto m = r.mapping(f, kIpAccessKeys.keys);
  if (!m) return;
  TableBuilder table(r, out);
  if (auto* v = m->get("allow")) read_ip_list(r, *v, Verdict::kAllow, table);
  if (auto* v = m->get("deny")) read_ip_list(r, *v, Verdict::kDeny, table);
  if (auto* v = m->get("allow_file")) read_ip_file(r, *v, Verdict::kAllow, table);
  if (auto* v = m->get("deny_file")) read_ip_file(r, *v, Verdict::kDeny, table);
  table.finish();
}

void read_cors(YamlReader& r, const Field& f, RouteConfig& route) {
  const auto m = r.mapping(f, kCorsKeys.keys);
  if (!m) return;
  CorsConfig& cors = route.cors;
  cors.enabled = true;
  // The gateway answers for the route's CORS: the upstream's own say is dropped.
  for (const char* name : {"Access-Control-Allow-Origin", "Access-Control-Allow-Credentials",
                           "Access-Control-Expose-Headers", "Access-Control-Allow-Methods",
                           "Access-Control-Allow-Headers", "Access-Control-Max-Age"}) {
    if (route.response_headers.drops(name)) {
      r.error(f, std::string("routes[].response_headers names ") + name +
                     ", which the route's cors sets");
    } else {
      route.response_headers.add_remove(name);
    }
  }
  if (auto* v = r.required(*m, "allow_origins")) {
    if (auto items = r.list(*v)) {
      if (items->empty()) r.error(*v, "must list at least one origin");
      for (const auto& item : *items) read_origin(r, item, cors);
    }
  }
  if (auto* v = m->get("allow_methods")) {
    if (auto s = read_token_list(r, *v, true, "method")) cors.allow_methods = std::move(*s);
  } else if (!route.match.methods.empty()) {
    for (const auto& method : route.match.methods) {
      if (!cors.allow_methods.empty()) cors.allow_methods += ", ";
      cors.allow_methods += method;
    }
  } else {
    cors.allow_methods = "GET, HEAD, PUT, PATCH, POST, DELETE";
  }
  if (auto* v = m->get("allow_headers")) {
    if (auto s = read_token_list(r, *v, false, "header name")) cors.allow_headers = std::move(*s);
  }
  // The limiter's headers are readable by every allowed page.
  cors.expose_headers =
      "RateLimit, RateLimit-Policy, Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, "
      "X-RateLimit-Reset, X-Request-Id";
  if (auto* v = m->get("expose_headers")) {
    if (auto s = read_token_list(r, *v, false, "header name"); s && !s->empty()) {
      cors.expose_headers += ", " + *s;
    }
  }
  if (auto* v = m->get("allow_credentials")) {
    if (auto b = r.boolean(*v)) {
      cors.allow_credentials = *b;
      if (*b && cors.any_origin) {
        r.error(*v, "allow_credentials with the origin \"*\" would let every site read a "
                    "signed-in user's responses: list the origins");
      }
    }
  }
  if (auto* v = m->get("max_age")) {
    if (auto n = r.integer(*v, 0, kMaxCorsMaxAge)) cors.max_age = *n;
  }
}

std::optional<ClientHeaders> read_client_headers(YamlReader& r, const Field& f) {
  const auto s = r.string(f);
  if (!s) return std::nullopt;
  if (*s == "all") return ClientHeaders::kAll;
  if (*s == "none") return ClientHeaders::kNone;
  if (*s == "ietf") return ClientHeaders::kIetf;
  if (*s == "legacy") return ClientHeaders::kLegacy;
  r.error(f, "expected all, none, ietf or legacy, got " + shown(*s));
  return std::nullopt;
}

}  // namespace sluice::config
