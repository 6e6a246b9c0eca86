// The readers of the configuration's top-level sections, one file each
// (server_section.cpp, ...). A reader fills its part of the Config from its
// YAML field, reports what is wrong within the section, and leaves notes for
// the second pass (resolve.hpp) wherever a value names another section's entry
// or must be checked against another section.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gateway/config/config.hpp"
#include "gateway/config/keys.hpp"
#include "gateway/config/yaml_reader.hpp"

namespace sluice::config {

// A value as read, and the mark of the reading where a check of it belongs.
struct ReadValue {
  Field field;
  YamlReader::Mark mark = 0;
  std::string text;  // the scalar after ${VAR} expansion, where the check needs it
};

// A header name the limiter reads, where it was configured.
struct HeaderUse {
  Field field;
  std::string name;
};

// What the first pass leaves for the second.
struct ReadNotes {
  bool server_listen_valid = true;        // false when server.listen is given but invalid
  std::optional<ReadValue> admin_listen;  // when admin.listen is a valid address
  std::optional<Field> tls_listen;        // when server.tls.listen is a valid address
  std::optional<Field> audit_stream;      // audit.redis_stream, when valid

  bool upstreams_read = false;    // false when the section is broken: names are not checked
  bool limits_read = false;       // absent counts as read: then every limit name is unknown
  std::vector<bool> limit_valid;  // per Config::limits entry: read without an error

  // limits.NAME.key header sources, then api_keys.header, in reading order.
  std::vector<HeaderUse> header_uses;

  bool api_keys_read = true;  // false when api_keys is broken: plan names are not checked
  std::set<std::string> consumer_plans;
  std::vector<ReadValue> consumer_plan_values;  // each YAML consumer's plan, where it was read
  std::optional<Field> default_plan;            // api_keys.default_plan, when given
  std::optional<Field> store;                   // api_keys.store, when it is redis
  std::optional<Field> plans;                   // the top-level plans list, when valid
  struct PlanOverride {
    std::string plan;
    Field field;
  };
  std::vector<PlanOverride> plan_overrides;  // every limits.NAME.plans entry
  YamlReader::Mark plans_mark = 0;           // plan names are checked once api_keys is read

  struct Route {
    std::optional<ReadValue> upstream;     // the upstream name, when it is a string
    std::vector<ReadValue> limit_names;    // each name in limits that is a string
    std::optional<Field> limits;           // the limits list itself
    std::optional<ReadValue> cost;         // when valid; its mark is the end of the route
    Field methods_or_route;                // where a method bypass is reported
    std::optional<HeaderUse> cost_header;  // when valid
    std::optional<ReadValue> max_cost;     // when valid and not 0
    std::vector<ReadValue> split_names;    // each upstreams[].name that is a string
    std::optional<ReadValue> mirror_upstream;  // mirror.upstream, when a string
    std::optional<Field> max_inspect_bytes;    // when valid
  };
  std::vector<Route> routes;  // per Config::routes entry

  std::vector<ReadValue> exempt_plans;  // each exemptions.plans entry that is a string
};

void read_server(YamlReader& r, const Field& f, Config& c, ReadNotes& notes);
// ip_access (top level and per route), routes[].cors, client_headers
// (access_section.cpp).
void read_ip_access(YamlReader& r, const Field& f, IpAccessConfig& out);
void read_cors(YamlReader& r, const Field& f, RouteConfig& route);
std::optional<ClientHeaders> read_client_headers(YamlReader& r, const Field& f);
// auth (auth_section.cpp), and a route's auth. collect_claim_paths fills
// auth.claim_paths once the limits and providers are read.
void read_auth(YamlReader& r, const Field& f, Config& c);
std::optional<RouteAuth> read_route_auth(YamlReader& r, const Field& f);
void collect_claim_paths(Config& c);
// Why `path` ("sub", "org.id") is not a claim path; empty when it is.
std::string claim_path_problem(std::string_view path);
// server.tls (tls_section.cpp).
void read_tls(YamlReader& r, const Field& f, ServerConfig& s, ReadNotes& notes);
void read_admin(YamlReader& r, const Field& f, Config& c, ReadNotes& notes);
void read_log(YamlReader& r, const Field& f, Config& c);
void read_audit(YamlReader& r, const Field& f, Config& c, ReadNotes& notes);
void read_tracing(YamlReader& r, const Field& f, Config& c);
// cert_file and key_file of a TLS server section (server.tls, its
// certificates[], rls.tls), both required.
std::optional<TlsCertificate> read_certificate_pair(YamlReader& r, const Mapping& m);
// After the limits: a rule may name one.
void read_rls(YamlReader& r, const Field& f, Config& c);
// A TLS client's section (upstreams.NAME.tls, tracing.tls): its files loaded
// and the context built, or null with the errors reported (`path` names the
// section in them).
std::shared_ptr<const UpstreamTls> read_client_tls(YamlReader& r, const Field& f,
                                                   const MappingKeys& keys, std::string_view path,
                                                   UpstreamTlsConfig& tls);
void read_redis(YamlReader& r, const Field& f, Config& c);
void read_local(YamlReader& r, const Field& f, Config& c);
void read_upstreams(YamlReader& r, const Field& f, Config& c, ReadNotes& notes);
// traffic_section.cpp: a route's request matchers (its match mapping), its
// split (upstreams, split_on), and a request key (header:NAME, cookie:NAME,
// ip, and with allow_path path) as hash_on and split_on name it.
void read_request_matchers(YamlReader& r, const Mapping& m, RequestMatchers& out);
void read_route_split(YamlReader& r, const Mapping& m, RouteConfig& route,
                      ReadNotes::Route& notes);
std::optional<HashOn> read_request_key(YamlReader& r, const Field& v, bool allow_path);
void read_route_timeouts(YamlReader& r, const Mapping& m, RouteConfig& route);
// An RE2 expression from `text` (matched against whole values), or null
// with an error at `f`.
std::shared_ptr<const re2::RE2> compile_regex(YamlReader& r, const Field& f,
                                              const std::string& text);
// routes[].retry, after the route's match (its methods) is read.
void read_route_retry(YamlReader& r, const Mapping& m, RouteConfig& route);
void read_route_mirror(YamlReader& r, const Mapping& m, RouteConfig& route,
                       ReadNotes::Route& notes);
// An upstream's health_check (health_check_section.cpp).
void read_health_check(YamlReader& r, const Field& f, UpstreamConfig& u);
void read_limits(YamlReader& r, const Field& f, Config& c, ReadNotes& notes);
void read_api_keys(YamlReader& r, const Field& f, Config& c, ReadNotes& notes);
void read_routes(YamlReader& r, const Field& f, Config& c, ReadNotes& notes);
void read_exemptions(YamlReader& r, const Field& f, Config& c, ReadNotes& notes);
// The top-level plans list (plans_section.cpp).
void read_plans(YamlReader& r, const Field& f, Config& c, ReadNotes& notes);
// A route's cost_header, max_cost and reject (route_cost_reject.cpp).
// routes[].cost as a mapping (the estimate from the request body): the
// field of its default, when valid (checked against the limits later).
std::optional<Field> read_body_cost(YamlReader& r, const Field& f, RouteConfig& route);
void read_route_cost_and_reject(YamlReader& r, const Mapping& m, RouteConfig& route,
                                ReadNotes::Route& notes);
// A route's request_headers and response_headers (route_headers.cpp); after
// its cost_header is read.
void read_route_headers(YamlReader& r, const Mapping& m, RouteConfig& route);

}  // namespace sluice::config
