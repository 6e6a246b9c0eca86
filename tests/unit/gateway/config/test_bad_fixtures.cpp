// Every bad-config fixture and the exact messages it must produce.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "gateway/config/load.hpp"
#include "support/config_text.hpp"

namespace sluice {
namespace {

using testing::kFixtures;

struct BadFixture {
  const char* file;
  std::vector<std::string> errors;  // "LINE: key.path: message", the file name is prepended
};

// Messages shared by several header-rule fixtures.
const std::string kProtected =
    "is a header Sluice sets or frames itself: a rule cannot set or remove it";
const std::string kControl =
    "a header value must not contain CR, LF, NUL or other control characters";
const std::string kVarList =
    "(known: ${client_ip}, ${request_id}, ${route}, ${scheme}; write \"$$\" for a literal \"$\")";

// Every file under tests/fixtures/bad/ and the exact errors it must produce.
const std::vector<BadFixture> kBadFixtures = {
    {"syntax_error.yaml", {"4: syntax error: end of sequence flow not found"}},
    {"empty_file.yaml", {"1: (root): expected a mapping"}},
    {"unknown_key_top.yaml", {"1: listen: unknown key \"listen\""}},
    {"unknown_key_nested.yaml", {"3: server.max_headers_bytes: unknown key \"max_headers_bytes\""}},
    {"duplicate_key.yaml", {"3: server.threads: duplicate key \"threads\" (first at line 2)"}},
    {"missing_routes.yaml", {"1: (root): missing required key \"routes\""}},
    {"missing_route_upstream.yaml", {"5: routes[0]: missing required key \"upstream\""}},
    {"missing_limit_key.yaml",
     {"3: limits.per_ip: missing required key \"key\"",
      "3: limits.per_ip: missing required key \"refill_per_second\""}},
    {"expected_integer.yaml",
     {"2: server.threads: expected an integer, got \"many\"",
      "3: server.max_body_bytes: expected an integer, got \"1.5\""}},
    {"expected_mapping.yaml",
     {"1: server: expected a mapping, got \"0.0.0.0:8080\"",
      "3: redis.circuit_breaker: expected a mapping, got \"5\"",
      "4: upstreams: expected a mapping, got a list"}},
    {"expected_list.yaml",
     {"3: upstreams.app.servers: expected a list, got \"127.0.0.1:9000\"",
      "4: routes: expected a list, got a mapping"}},
    {"expected_string.yaml",
     {"2: log.level: expected a string, got a list",
      "4: redis.key_prefix: expected a string, got null"}},
    {"expected_bool.yaml",
     {"2: log.access_log: expected true or false, got \"yes\"",
      "10: routes[0].strip_prefix: expected true or false, got \"1\"",
      "11: routes[0].ignore_client_abort: expected true or false, got \"on\""}},
    {"expected_number.yaml",
     {"5: limits.per_ip.capacity: expected a number, got \"lots\"",
      "6: limits.per_ip.refill_per_second: expected a number, got \".inf\""}},
    {"zero_timeout.yaml",
     {"2: server.header_timeout_ms: must be greater than 0, got 0",
      "4: redis.timeout_ms: must be greater than 0, got 0",
      "8: upstreams.app.response_timeout_ms: must be greater than 0, got 0"}},
    {"negative_size.yaml",
     {"2: server.threads: must not be negative, got -1",
      "3: server.max_header_bytes: must be greater than 0, got 0",
      "4: server.max_body_bytes: must be greater than 0, got -10",
      "8: upstreams.app.max_idle_connections: must not be negative, got -1"}},
    {"bad_listen_address.yaml",
     {"2: server.listen: host must be an IP address, not a name, got \"localhost:8080\"",
      "4: admin.listen: port must be between 0 and 65535, got \"127.0.0.1:70000\""}},
    {"admin_listen_conflict.yaml",
     {"4: admin.listen: conflicts with server.listen \"0.0.0.0:8080\""}},
    {"admin_token_unreadable.yaml",
     {"3: admin.token_file: cannot read \"/nonexistent/sluice-admin-token\": No such file or "
      "directory"}},
    {"tls_unreadable_cert.yaml",
     {"2: server.tls: cannot load certificate chain /nonexistent/sluice-cert.pem: No such file "
      "or directory"}},
    {"tls_bad_version.yaml",
     {"2: server.tls: missing required key \"cert_file\"",
      "2: server.tls: missing required key \"key_file\"",
      "3: server.tls.min_version: expected \"1.2\" or \"1.3\", got \"1.1\"",
      "4: server.tls.certificates: expected a list, got a mapping",
      "5: server.tls.session_timeout_ms: must be greater than 0, got 0",
      "6: server.tls.ticket_key_rotation_ms: expected an integer, got \"hourly\""}},
    {"tls_bad_ciphers.yaml",
     {"3: server.tls.ciphers: OpenSSL knows no cipher in \"NO-SUCH-CIPHER:ALSO-NONE\"",
      "4: server.tls.ciphersuites: OpenSSL knows no cipher in \"TLS_NOT_A_SUITE\""}},
    {"tls_ticket_rotation_too_short.yaml",
     {"5: server.tls.ticket_key_rotation_ms: must be at least 7200 (session_timeout_ms / 1000: "
      "at most that many ticket keys are held), got 1000"}},
    {"admin_token_empty.yaml",
     {"2: admin.token_file: \"/dev/null\" is empty; an admin token must not be empty"}},
    {"bad_upstream_server.yaml",
     {"4: upstreams.orders.servers[0]: expected host:port, got \"127.0.0.1\"",
      "5: upstreams.orders.servers[1]: IPv6 addresses need brackets, e.g. \"[::1]:8080\", got "
      "\"::1:9001\"",
      "6: upstreams.orders.servers[2]: port must be between 1 and 65535, got "
      "\"orders.internal:0\"",
      "7: upstreams.orders.servers[3]: invalid host \"bad host\"",
      "8: upstreams.orders.servers[4]: invalid IPv4 address \"300.1.1.1\""}},
    {"empty_servers.yaml",
     {"3: upstreams.orders.servers: must list at least one server",
      "4: upstreams.users: missing required key \"servers\""}},
    {"health_check_path_missing.yaml",
     {"4: upstreams.orders.health_check: missing required key \"path\""}},
    {"upstream_tls_ca_missing.yaml",
     {"4: upstreams.orders.tls: cannot load CA file /nonexistent/sluice-upstream-ca.pem: No "
      "such file or directory"}},
    {"upstream_tls_half_pair.yaml",
     {"5: upstreams.orders.tls.certificate_file: requires upstreams.orders.tls.key_file",
      "9: upstreams.users.tls.key_file: requires upstreams.users.tls.certificate_file",
      "10: upstreams.users.tls.min_version: expected \"1.2\" or \"1.3\", got \"1.1\""}},
    {"route_matchers.yaml",
     {"8: routes[0].match.headers[0].prefix: only one of exact, prefix, regex, present or absent "
      "is allowed",
      "9: routes[0].match.headers[1].name: invalid header name \"X Beta\"",
      "10: routes[0].match.headers[2]: missing one of exact, prefix, regex, present or absent",
      "11: routes[0].match.headers[3].regex: invalid regular expression: missing ): (unclosed in "
      "\"(unclosed\"",
      "12: routes[0].match.headers[4].present: must be true (write absent: true for the "
      "opposite)",
      "14: routes[0].match.query[0]: missing required key \"name\"",
      "16: routes[0].match.cookies[0].invert: expected true or false, got \"maybe\""}},
    {"route_split.yaml",
     {"8: routes[0].upstreams: a route has upstream or upstreams, not both",
      "11: routes[1].upstreams: the weights add up to 0: no upstream would take a request",
      "14: routes[2].upstreams[0].weight: must not be negative, got -1",
      "14: routes[2].upstreams[1].name: unknown upstream \"nowhere\"",
      "15: routes[2].split_on: must be header:NAME, cookie:NAME or ip, got \"path\"",
      "19: routes[3].split_on: is read only with upstreams",
      "20: routes[4]: missing required key \"upstream\"",
      "24: routes[5].upstreams[1].name: upstream \"stable\" is listed twice"}},
    {"route_mirror.yaml",
     {"7: routes[0].mirror.upstream: unknown upstream \"shadow\"",
      "11: routes[1].mirror.percent: must be at most 100, got 150",
      "11: routes[1].mirror.max_in_flight: must be greater than 0, got 0",
      "15: routes[2].mirror: missing required key \"upstream\"",
      "15: routes[2].mirror.percent: must be greater than 0, got 0"}},
    {"route_retry.yaml",
     {"4: upstreams.app.retry_budget: percent and min_concurrent are both 0: no retry could ever "
      "start (remove the routes' retry instead)",
      "7: upstreams.bounds.retry_budget.percent: must be at most 100, got 150",
      "12: routes[0].retry: the route takes only non-idempotent methods, which are retried only "
      "with retry_non_idempotent: true",
      "16: routes[1].retry.attempts: must be at most 10, got 11",
      "16: routes[1].retry.on[0]: unknown failure \"5xx\" (connect_failure, reset, timeout, 502, "
      "503, 504, gateway_error or unavailable)",
      "20: routes[2].retry.on: must list at least one failure to retry",
      "20: routes[2].retry.backoff: max_ms (10) must be at least base_ms (50)",
      "24: routes[3].retry: missing required key \"on\""}},
    {"upstream_outliers.yaml",
     {"4: upstreams.nothing.outlier_detection: consecutive_5xx and consecutive_gateway_errors are "
      "both 0: nothing would eject a server (remove outlier_detection instead)",
      "7: upstreams.short.outlier_detection: max_ejection_ms (100) must be at least "
      "base_ejection_ms (30000)",
      "10: upstreams.bounds.outlier_detection.consecutive_5xx: must not be negative, got -1",
      "10: upstreams.bounds.outlier_detection.max_ejection_percent: must be at most 100, got 150"}},
    {"upstream_balance.yaml",
     {"4: upstreams.weighted.servers[0].weight: must be greater than 0, got 0",
      "5: upstreams.weighted.servers[1].weight: must be greater than 0, got -2",
      "6: upstreams.weighted.servers[2]: missing required key \"address\"",
      "7: upstreams.weighted.servers[3].weigth: unknown key \"weigth\"",
      "10: upstreams.policy.balance: must be round_robin, least_request, random or hash",
      "13: upstreams.unkeyed.balance: balance hash requires hash_on",
      "17: upstreams.keyed.hash_on: must be header:NAME, cookie:NAME, ip or path, got "
      "\"query:user\"",
      "20: upstreams.stray.hash_on: is read only with balance: hash",
      "24: upstreams.bad_header.hash_on: invalid header name \"X User\""}},
    {"upstream_protocol.yaml",
     {"4: upstreams.greeter.protocol: must be http1, h2c or h2",
      "7: upstreams.plain.protocol: h2c is HTTP/2 without TLS: with a tls section, use protocol h2"}},
    {"health_check_path_relative.yaml",
     {"5: upstreams.orders.health_check.path: must start with \"/\", got \"healthz\""}},
    {"health_check_path_space.yaml",
     {"5: upstreams.orders.health_check.path: must not contain spaces, control or non-ASCII "
      "characters, got \"/health check\""}},
    {"health_check_timeout_not_less.yaml",
     {"4: upstreams.orders.health_check: timeout_ms (1000) must be less than interval_ms (1000)",
      "9: upstreams.users.health_check: timeout_ms (5000) must be less than interval_ms (3000)"}},
    {"health_check_bad_threshold.yaml",
     {"6: upstreams.orders.health_check.healthy_threshold: must be greater than 0, got 0",
      "7: upstreams.orders.health_check.unhealthy_threshold: expected an integer, got \"many\""}},
    {"health_check_bad_status.yaml",
     {"6: upstreams.orders.health_check.expected_status: must be a status between 100 and 599, "
      "got 700",
      "11: upstreams.users.health_check.expected_status[1]: must be a status between 100 and 599, "
      "got 99",
      "11: upstreams.users.health_check.expected_status[2]: expected an integer, got \"ok\""}},
    {"health_check_empty_status.yaml",
     {"6: upstreams.orders.health_check.expected_status: must list at least one status"}},
    {"health_check_not_mapping.yaml",
     {"4: upstreams.orders.health_check: expected a mapping, got \"/healthz\"",
      "9: upstreams.users.health_check.interval: unknown key \"interval\"",
      "10: upstreams.users.health_check.interval_ms: must be greater than 0, got 0"}},
    {"bad_name.yaml",
     {"2: upstreams.orders v2: invalid name \"orders v2\": use letters, digits, \"_\", \"-\" and "
      "\".\"",
      "5: routes[0].name: invalid name \"all/everything\": use letters, digits, \"_\", \"-\" and "
      "\".\""}},
    {"bad_log_level.yaml",
     {"2: log.level: unknown log level \"verbose\" (expected trace, debug, info, warn or error)"}},
    {"bad_access_log_flush.yaml", {"2: log.access_log_flush_ms: must be at most 60000, got 60001"}},
    {"bad_cidr.yaml",
     {"4: server.trusted_proxies[1]: invalid CIDR \"10.0.0.0/33\"",
      "5: server.trusted_proxies[2]: invalid CIDR \"proxy.internal\"",
      "6: server.trusted_proxies[3]: invalid CIDR \"::1/129\""}},
    {"bad_redis_url.yaml",
     {"2: redis.url: invalid url: must start with redis:// or rediss://, got "
      "\"http://127.0.0.1:6379\""}},
    // The password is never shown.
    {"bad_redis_url_port.yaml",
     {"2: redis.url: invalid url: port must be between 1 and 65535, got "
      "\"redis://:***@127.0.0.1:0/0\""}},
    {"redis_tls_without_rediss.yaml",
     {"3: redis.tls_ca_file: only valid with a rediss:// url",
      "4: redis.tls_cert_file: only valid with a rediss:// url",
      "4: redis.tls_cert_file: requires redis.tls_key_file"}},
    {"bad_api_key_header.yaml",
     {"3: api_keys.header: invalid header name \"X API Key\"",
      "4: api_keys.default_plan: must not be empty"}},
    {"duplicate_consumer_key.yaml",
     {"6: api_keys.consumers[2].key: duplicate consumer key (first at line 4)",
      "7: api_keys.consumers[3]: missing required key \"key\""}},
    {"bad_key_source.yaml",
     {"4: limits.per_user.key: unknown key source \"user\" (expected api_key, ip, path, route, "
      "global, org, header:NAME, query:NAME, jwt:CLAIM, cert:FIELD or body:PATH)",
      "8: limits.per_header.key: invalid header name \"\" in \"header:\"",
      "12: limits.composite.key[1]: missing parameter name in \"query:\"",
      "16: limits.empty.key: must list at least one key source"}},
    {"bad_plans.yaml",
     {"8: limits.per_key.plans.pro: expected a mapping, got \"500\"",
      "9: limits.per_key.plans.team.burst: unknown key \"burst\"",
      "14: limits.per_ip.plans: expected a mapping, got a list"}},
    {"unknown_plan.yaml",
     {"13: limits.per_key.plans.por: unknown plan \"por\": not api_keys.default_plan nor the "
      "plan of a consumer (known: free, pro)"}},
    {"bad_capacity.yaml",
     {"5: limits.per_ip.capacity: must be greater than 0, got 0",
      "6: limits.per_ip.refill_per_second: must be greater than 0, got -0.5"}},
    {"bad_cost.yaml", {"8: routes[0].cost: must be greater than 0, got 0"}},
    {"cost_exceeds_capacity.yaml",
     {"16: routes[0].cost: cost 5 is more than the capacity 2 of limit \"per_key\" plan "
      "\"trial\""}},
    {"bad_on_redis_failure.yaml",
     {"8: routes[0].on_redis_failure: expected open, closed or local, got \"deny\""}},
    {"bad_on_limit.yaml", {"8: routes[0].on_limit: expected reject or delay, got \"queue\""}},
    {"delay_without_max_delay.yaml",
     {"8: routes[0].on_limit: delay needs max_delay_ms greater than 0",
      "12: routes[1].on_limit: delay needs max_delay_ms greater than 0"}},
    {"bad_max_delay.yaml",
     {"9: routes[0].max_delay_ms: must not be negative, got -250",
      "13: routes[1].max_delay_ms: expected an integer, got \"0.5\""}},
    {"duplicate_route_name.yaml",
     {"8: routes[1].name: duplicate route name \"api\" (first at line 5)"}},
    {"match_no_path.yaml",
     {"6: routes[0].match: missing one of path_prefix, path_exact or path_regex"}},
    {"match_two_paths.yaml",
     {"8: routes[0].match: only one of path_prefix, path_exact or path_regex is allowed"}},
    {"path_not_normalized.yaml",
     {"6: routes[0].match.path_prefix: requests are matched on their normalized path: write "
      "\"/api/v1/\" instead of \"/api//v1/\"",
      "9: routes[1].match.path_exact: requests are matched on their normalized path: write "
      "\"/api\" instead of \"/%61pi\"",
      "12: routes[2].match.path_prefix: requests are matched on their normalized path: write "
      "\"/api/\" instead of \"/api;jsessionid=x/\"",
      "15: routes[3].match.path_prefix: invalid path \"/api/../admin\": dot segments in path"}},
    {"path_not_absolute.yaml",
     {"6: routes[0].match.path_prefix: must start with \"/\", got \"api/\"",
      "9: routes[1].match.path_exact: must start with \"/\", got \"health\""}},
    {"bad_regex.yaml",
     {"7: routes[0].match.path_regex: invalid regular expression: missing ): /users/([0-9]+ in "
      "\"/users/([0-9]+\"",
      "11: routes[1].match.path_regex: invalid regular expression: missing ]: [0-9 in "
      "\"/items/[0-9\""}},
    {"bad_method.yaml",
     {"8: routes[0].match.methods[1]: invalid method \"PO ST\"",
      "13: routes[1].match.methods: must list at least one method (omit the key to allow any "
      "method)"}},
    {"bad_host.yaml",
     {"8: routes[0].match.host: must be a host name without a port, got "
      "\"api.example.com:8080\""}},
    {"strip_prefix_without_prefix.yaml",
     {"8: routes[0].strip_prefix: only valid with match.path_prefix"}},
    {"unknown_upstream.yaml", {"7: routes[0].upstream: unknown upstream \"users\""}},
    // The example of the product's configuration contract, line for line.
    {"unknown_limit.yaml", {"14: routes[2].limits[0]: unknown limit \"per_user\""}},
    {"duplicate_limit_in_route.yaml",
     {"10: routes[0].limits[1]: limit \"per_ip\" is listed twice"}},
    // YAML mistakes that yaml-cpp reports in words that do not name them.
    {"tab_indentation.yaml",
     {"3: syntax error: a tab in the indentation (YAML indents with spaces only)"}},
    {"merge_key.yaml",
     {"10: limits.per_path: YAML merge keys (\"<<\") are not supported: write the keys out (an "
      "alias of a whole value, \"key: *anchor\", works)"}},
    // Limit algorithms: each takes its own keys only.
    {"bad_algorithm.yaml",
     {"5: limits.per_minute.algorithm: unknown algorithm \"leaky_bucket\" (expected "
      "token_bucket, sliding_window, quota, sliding_log or concurrency)",
      "8: limits.per_minute.shadow: expected true or false, got \"maybe\""}},
    {"sliding_window_missing_window.yaml",
     {"3: limits.per_minute: missing required key \"window_ms\""}},
    {"sliding_window_zero_window.yaml",
     {"7: limits.per_minute.window_ms: must be greater than 0, got 0",
      "9: limits.per_minute.plans.free.window_ms: must be greater than 0, got -5"}},
    {"sliding_window_with_refill.yaml",
     {"8: limits.per_minute.refill_per_second: is not used by algorithm sliding_window (it "
      "admits capacity per window_ms)",
      "10: limits.per_minute.plans.free.refill_per_second: is not used by algorithm "
      "sliding_window (it admits capacity per window_ms)"}},
    {"token_bucket_with_window.yaml",
     {"7: limits.per_ip.window_ms: needs algorithm: sliding_window",
      "9: limits.per_ip.plans.free.window_ms: needs algorithm: sliding_window"}},
    // Quotas: a calendar period of a time zone, and nothing of the other algorithms.
    {"quota_bad_period.yaml",
     {"7: limits.monthly.period: unknown period \"fortnight\" (expected minute, hour, day, "
      "week, month or year)"}},
    {"quota_missing_period.yaml", {"3: limits.monthly: missing required key \"period\""}},
    {"quota_bad_timezone.yaml",
     {"8: limits.a.timezone: invalid timezone \"Mars/Olympus_Mons\": no such time zone in the "
      "system's database (is tzdata installed?)",
      "14: limits.b.timezone: invalid timezone \"../../etc/passwd\": expected UTC, an offset "
      "such as +05:30, or a zone name such as America/New_York",
      "20: limits.c.timezone: invalid timezone \"/usr/share/zoneinfo/UTC\": expected UTC, an "
      "offset such as +05:30, or a zone name such as America/New_York",
      "26: limits.d.timezone: invalid timezone \"+25:00\": a fixed offset is +HH:MM or -HH:MM, "
      "at most 18:00",
      "32: limits.e.timezone: invalid timezone \"+5:30\": a fixed offset is +HH:MM or -HH:MM, "
      "at most 18:00"}},
    {"quota_other_fields.yaml",
     {"8: limits.monthly.refill_per_second: is not used by algorithm quota (it admits capacity "
      "per period)",
      "9: limits.monthly.window_ms: is not used by algorithm quota (it admits capacity per "
      "period)",
      "10: limits.monthly.lease_tokens: needs algorithm: token_bucket (leases are taken from "
      "token buckets only)",
      "12: limits.monthly.plans.free.refill_per_second: is not used by algorithm quota (it "
      "admits capacity per period)",
      "17: limits.per_ip.period: needs algorithm: quota",
      "18: limits.per_ip.timezone: needs algorithm: quota"}},
    // A concurrency limit: a lease of a second at least, no token lease, no
    // window, and no route waits for it.
    {"concurrency_fields.yaml",
     {"8: limits.in_flight.lease_ms: must be at least 1000 (slots are renewed every third of it)",
      "9: limits.in_flight.lease_tokens: needs algorithm: token_bucket (leases are taken from "
      "token buckets only)",
      "10: limits.in_flight.window_ms: is not used by algorithm concurrency",
      "15: routes[0].limits: on_limit: delay cannot wait for concurrency limit \"in_flight\" "
      "(its slots come back when exchanges end)"}},
    // The denial stream: a key name without whitespace, a positive cap.
    {"rls.yaml",
     {"7: rls.on_redis_failure: must be error, open or closed, got \"maybe\"",
      "12: rls.domains[0].descriptors[0].rate_limit.unit: unknown unit \"fortnight\" (expected "
      "second, minute, hour, day, week, month or year)",
      "13: rls.domains[0].descriptors[1]: descriptor \"ip\" given twice at this level",
      "15: rls.domains[0].descriptors[2]: a concurrency limit's entry (the request's id) "
      "matches any value: give it no value",
      "19: rls.domains[0].descriptors[3].rate_limit: an unlimited rate_limit has no unit or "
      "limit",
      "21: rls.domains[0].descriptors[4].quota_mode: quota_mode is not supported",
      "24: rls.domains[0].descriptors[5].descriptors: a concurrency limit's rule ends its "
      "descriptor (a release call adds release after it)",
      "25: rls.domains[0].descriptors[6]: an api_key entry never goes into a metric label: no "
      "detailed_metric or value_to_metric",
      "25: rls.domains[0].descriptors[6]: an api_key entry \"api\" cannot share its key with "
      "another descriptor at its level",
      "29: rls.domains[0].descriptors[6].descriptors[0]: an api_key entry below another api_key "
      "entry",
      "33: rls.domains[1].domain: domain \"edge\" given twice"}},
    {"tracing.yaml",
     {"4: tracing.endpoint: the scheme must be https or http: \"grpc://collector:4317\"",
      "5: tracing.sampling_ratio: expected a number from 0 to 1, got 1.5",
      "6: tracing.parent_based: expected true or false, got \"maybe\"",
      "8: tracing.headers.bad name: not an HTTP header name: \"bad name\"",
      "9: tracing.headers.Content-Length: Sluice sets Content-Length itself",
      "10: tracing.max_queue_spans: must be greater than 0, got 0",
      "12: tracing.tls.certificate_file: requires tracing.tls.key_file",
      "13: tracing.exporter: unknown key \"exporter\""}},
    {"audit_fields.yaml",
     {"4: audit.redis_stream: must not contain whitespace, got \"sluice denials\"",
      "5: audit.max_len: must be greater than 0, got 0",
      "6: audit.extra: unknown key \"extra\""}},
    // A sliding log: capacity capped, no lease, no refill.
    {"sliding_log_capacity.yaml",
     {"6: limits.strict.capacity: must be at most 10000 for algorithm sliding_log (it keeps one "
      "entry per unit admitted within window_ms)",
      "8: limits.strict.lease_tokens: needs algorithm: token_bucket (leases are taken from "
      "token buckets only)",
      "9: limits.strict.refill_per_second: is not used by algorithm sliding_log (it admits "
      "capacity per window_ms)",
      "11: limits.strict.plans.free.capacity: must be at most 10000 for algorithm sliding_log "
      "(it keeps one entry per unit admitted within window_ms)"}},
    {"sliding_window_lease.yaml",
     {"8: limits.per_minute.lease_tokens: needs algorithm: token_bucket (leases are taken from "
      "token buckets only)"}},
    // Read with the process environment, where none of these variables is set.
    {"env_not_set.yaml",
     {"3: upstreams.app.servers[0]: environment variable SLUICE_FIXTURE_NEVER_SET_UPSTREAM is "
      "not set",
      "5: redis.url: environment variable SLUICE_FIXTURE_NEVER_SET_REDIS_URL is not set",
      "7: redis.timeout_ms: expected an integer, got \"fifty\"",
      "9: log.level: unterminated \"${\" (write \"$${\" for a literal \"${\")"}},
    // Cost from a request header, the reject reply, exemptions, IPv6 grouping.
    {"bad_cost_header.yaml", {"14: routes[0].cost_header: invalid header name \"X Cost\""}},
    {"cost_header_reserved.yaml",
     {"14: routes[0].cost_header: \"content-length\" is a header the proxy sets or frames "
      "itself"}},
    {"max_cost_without_cost_header.yaml", {"14: routes[0].max_cost: only valid with cost_header"}},
    {"bad_max_cost.yaml", {"15: routes[0].max_cost: must not be negative, got -1"}},
    {"max_cost_exceeds_capacity.yaml",
     {"15: routes[0].max_cost: max_cost 50 is more than the capacity 20 of limit \"per_ip\""}},
    {"bad_reject_status.yaml",
     {"14: routes[0].reject.status: must be a 4xx or 5xx status, got 200"}},
    {"reject_content_type_without_body.yaml",
     {"14: routes[0].reject.content_type: only valid with body"}},
    {"bad_reject_content_type.yaml",
     {"17: routes[0].reject.content_type: invalid content type "
      "\"text/plain\\x0d\\nX-Injected: 1\""}},
    {"bad_exempt_cidr.yaml", {"5: exemptions.client_cidrs[1]: invalid CIDR \"10.0.0.0/33\""}},
    {"unknown_exempt_plan.yaml",
     {"8: exemptions.plans[1]: no consumer in api_keys.consumers has plan \"internl\" (only "
      "listed keys can be exempt; consumers' plans: internal)"}},
    {"bad_ipv6_prefix.yaml",
     {"9: limits.per_ip.ipv6_prefix: must be greater than 0, got 0",
      "14: limits.per_host.ipv6_prefix: must be at most 128, got 129"}},
    // Header rules of a route.
    {"bad_header_rule_name.yaml",
     {"10: routes[0].request_headers.set.X Tenant: invalid header name \"X Tenant\"",
      "11: routes[0].request_headers.remove[1]: invalid header name \"Bad:Name\""}},
    {"bad_header_rule_value.yaml",
     {"10: routes[0].response_headers.set.X-Note: " + kControl,
      "11: routes[0].response_headers.set.X-Nul: " + kControl,
      "12: routes[0].response_headers.set.X-List: expected a string, got a list"}},
    {"header_rule_unknown_variable.yaml",
     {"10: routes[0].request_headers.set.X-Client: unknown variable \"${client_address}\" " +
          kVarList,
      "11: routes[0].request_headers.set.X-Env: unknown variable \"${HOME}\" " + kVarList}},
    {"header_rule_unterminated_variable.yaml",
     {"10: routes[0].response_headers.set.X-Served-By: unterminated \"${\" (write \"$$\" for a "
      "literal \"$\")"}},
    {"header_rule_protected_request.yaml",
     {"10: routes[0].request_headers.set.x-forwarded-for: \"x-forwarded-for\" " + kProtected,
      "11: routes[0].request_headers.set.Host: \"Host\" " + kProtected,
      "12: routes[0].request_headers.remove[0]: \"X-Request-Id\" " + kProtected,
      "12: routes[0].request_headers.remove[1]: \"Proxy-Authorization\" " + kProtected,
      "12: routes[0].request_headers.remove[2]: \"Content-Length\" " + kProtected}},
    {"header_rule_protected_response.yaml",
     {"10: routes[0].response_headers.set.Retry-After: \"Retry-After\" " + kProtected,
      "11: routes[0].response_headers.remove[0]: \"X-RateLimit-Remaining\" " + kProtected,
      "11: routes[0].response_headers.remove[1]: \"RateLimit-Policy\" " + kProtected,
      "11: routes[0].response_headers.remove[2]: \"Connection\" " + kProtected,
      "11: routes[0].response_headers.remove[3]: \"X-Request-Id\" " + kProtected}},
    {"header_rule_cost_header.yaml",
     {"16: routes[0].request_headers.remove[0]: \"x-cost\" is the route's cost_header, which "
      "is never forwarded"}},
    {"header_rule_usage_header.yaml",
     {"18: routes[0].request_headers.set.x-usage-tokens: \"x-usage-tokens\" is the route's "
      "cost_from_response header, which is never forwarded"}},
    {"route_body_usage.yaml",
     {"10: routes[0].cost_from_response: needs a header, a body, or both",
      "15: routes[1].cost_from_response.body: a path is member names (letters, digits, _ and -, "
      "at most 64 bytes each) joined by dots",
      "20: routes[2].cost_from_response.body: a weight is a number above 0, written before its "
      "path: 4 * usage.output_tokens",
      "20: routes[2].cost_from_response.max_inspect_bytes: must be at least 1024, got 100",
      "25: routes[3].cost_from_response.max_inspect_bytes: only valid with body"}},
    {"header_rule_duplicate.yaml",
     {"11: routes[0].request_headers.remove[0]: header \"x-tenant\" is named twice (first at "
      "line 10)",
      "11: routes[0].request_headers.remove[2]: header \"COOKIE\" is named twice (first at line "
      "11)"}},
};

}  // namespace

TEST_CASE("every bad fixture gives exactly its messages", "[config]") {
  for (const auto& fixture : kBadFixtures) {
    const std::string path = kFixtures + "/bad/" + fixture.file;
    std::vector<std::string> expected;
    for (const auto& e : fixture.errors) expected.push_back(path + ":" + e);
    const auto result = load_config_file(path);
    INFO(path);
    CHECK_FALSE(result.config);
    CHECK(result.errors == expected);
  }
}

TEST_CASE("every file under fixtures/bad is in the table", "[config]") {
  std::set<std::string> listed;
  for (const auto& fixture : kBadFixtures) {
    CHECK(listed.insert(fixture.file).second);  // no fixture listed twice
  }
  std::set<std::string> on_disk;
  for (const auto& entry : std::filesystem::directory_iterator(kFixtures + "/bad")) {
    on_disk.insert(entry.path().filename().string());
  }
  CHECK(on_disk == listed);
}

}  // namespace sluice
