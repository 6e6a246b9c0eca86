#include "middleware/ratelimit/admin/bucket_request.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/ascii.hpp"
#include "common/query_params.hpp"
#include "common/target_parts.hpp"
#include "gateway/request_target.hpp"
#include "middleware/ratelimit/algorithms/algorithm.hpp"
#include "middleware/ratelimit/api_key.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/identity.hpp"

namespace sluice {
namespace {

BucketRequestError bad_request(std::string message) {
  return {400, std::move(message)};
}

// "%XX" for every byte but ALPHA / DIGIT, so that form-decoding gives back
// exactly `bytes`.
void append_form_encoded(std::string& out, std::string_view bytes) {
  constexpr char kHex[] = "0123456789ABCDEF";
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (ascii::is_alpha(c) || ascii::is_digit(c)) {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 0xF];
    }
  }
}

// "api_key", "header:NAME": a key part as the config writes it.
std::string kind_name(const KeySource& source) {
  std::string name(key_source_name(source.kind));
  if (source.kind == KeySource::Kind::kHeader || source.kind == KeySource::Kind::kQuery ||
      source.kind == KeySource::Kind::kJwt || source.kind == KeySource::Kind::kCert ||
      source.kind == KeySource::Kind::kBody) {
    name += ":" + source.name;
  }
  return name;
}

std::string key_list(const LimitConfig& limit) {
  std::string out;
  for (const auto& source : limit.key) out += (out.empty() ? "" : ", ") + kind_name(source);
  return out;
}

// A request carrying the query's values where a request would: the API key in
// api_keys.header, headers and query parameters by name, the client IP, the
// path and the route. Owns what its view points to.
struct SyntheticRequest {
  std::map<std::string, std::string> headers;  // lower-case name -> value
  std::string query;
  std::string path = "/";
  std::string route;
  IpAddress client_ip{};
  std::vector<std::pair<std::string, std::string>> claims;  // jwt: parts, by claim path
  usage::BodyFields body_fields;  // body: parts, by path
  ClientCertificate cert;                                    // cert: parts
  std::string org;                                           // org parts

  RequestView view() const {
    RequestView v;
    v.method = "GET";
    v.path = path;
    v.query = query;
    v.route = route;
    v.client_ip = client_ip;
    v.claims = &claims;
    v.body_fields = &body_fields;
    v.cert = &cert;
    v.header = [this](std::string_view name) -> std::optional<std::string_view> {
      std::string lower(name);
      ascii::to_lower_in_place(lower);
      const auto it = headers.find(lower);
      if (it == headers.end()) return std::nullopt;
      return std::string_view(it->second);
    };
    return v;
  }

  // False when another part already put a different value in that header.
  bool set_header(std::string name, std::string value) {
    ascii::to_lower_in_place(name);
    const auto [it, inserted] = headers.emplace(std::move(name), value);
    return inserted || it->second == value;
  }
};

// Puts value `value` of part `source` where a request carries it.
std::optional<BucketRequestError> place(SyntheticRequest& request, const Config& config,
                                        const KeySource& source, const std::string& value,
                                        std::size_t index) {
  const std::string which = "value " + std::to_string(index + 1) + " (" + kind_name(source) + ")";
  if (value.empty()) return bad_request(which + " is empty");
  bool placed = true;
  switch (source.kind) {
    case KeySource::Kind::kApiKey:
      placed =
          request.set_header(config.api_keys.header,
                             reads_bearer_credential(config.api_keys) ? "Bearer " + value : value);
      break;
    case KeySource::Kind::kIp: {
      const auto ip = parse_ip(value);
      if (!ip) return bad_request(which + " is not an IP address");
      request.client_ip = *ip;
      break;
    }
    case KeySource::Kind::kPath: {
      // Keyed as a request's path is: normalized, without ";parameters".
      NormalizedTarget normalized;
      if (value.front() != '/' || value.find('?') != std::string::npos ||
          !normalize_target(value, normalized).empty()) {
        return bad_request(which + " is not a request path (\"/...\" without a query)");
      }
      request.path = std::move(normalized.route_path);
      break;
    }
    case KeySource::Kind::kRoute:
      request.route = value;
      break;
    case KeySource::Kind::kGlobal:
      break;
    case KeySource::Kind::kHeader:
      placed = request.set_header(source.name, value);
      break;
    case KeySource::Kind::kJwt:
      request.claims.emplace_back(source.name, value);
      break;
    case KeySource::Kind::kBody:
      request.body_fields.push_back({source.name, std::string(value), false});
      break;
    case KeySource::Kind::kOrg:
      request.org = value;
      break;
    case KeySource::Kind::kCert:
      (source.name == "subject"   ? request.cert.subject
       : source.name == "san_uri" ? request.cert.san_uri
       : source.name == "san_dns" ? request.cert.san_dns
                                  : request.cert.fingerprint) = value;
      break;
    case KeySource::Kind::kQuery:
      if (!request.query.empty()) request.query += '&';
      append_form_encoded(request.query, source.name);
      request.query += '=';
      append_form_encoded(request.query, value);
      break;
  }
  if (!placed) return bad_request(which + " differs from another value read from the same header");
  return std::nullopt;
}

}  // namespace

std::variant<BucketQuery, BucketRequestError> parse_bucket_target(std::string_view target) {
  const TargetParts parts = split_target(target);
  if (!parts.path.starts_with(kBucketsPath)) return BucketRequestError{404, "not found"};
  BucketQuery query;
  query.limit = std::string(parts.path.substr(kBucketsPath.size()));
  if (query.limit.empty() || query.limit.find('/') != std::string::npos) {
    return BucketRequestError{404, "not found"};
  }
  std::string_view rest = parts.query;
  while (!rest.empty()) {
    const auto amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view{} : rest.substr(amp + 1);
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    const std::string name = form_decode(pair.substr(0, eq));
    std::string value = eq == std::string_view::npos ? "" : form_decode(pair.substr(eq + 1));
    if (name == "value") {
      query.values.push_back(std::move(value));
    } else if (name == "plan") {
      if (query.plan) return bad_request("plan given more than once");
      query.plan = std::move(value);
    } else {
      return bad_request("unknown parameter (expected value and plan)");
    }
  }
  return query;
}

std::size_t bucket_value_count(const LimitConfig& limit) {
  return static_cast<std::size_t>(
      std::count_if(limit.key.begin(), limit.key.end(),
                    [](const KeySource& k) { return k.kind != KeySource::Kind::kGlobal; }));
}

std::variant<BucketTarget, BucketRequestError, StoreQuestion> find_bucket(
    const Config& config, const BucketQuery& query,
    const std::optional<std::shared_ptr<const StoredConsumer>>& stored) {
  const auto limit = std::find_if(config.limits.begin(), config.limits.end(),
                                  [&](const LimitConfig& l) { return l.name == query.limit; });
  if (limit == config.limits.end()) return BucketRequestError{404, "no limit of that name"};
  const std::size_t expected = bucket_value_count(*limit);
  if (query.values.size() != expected) {
    return bad_request("limit \"" + limit->name + "\" is keyed by " + key_list(*limit) + ": give " +
                       std::to_string(expected) + " value parameter(s), got " +
                       std::to_string(query.values.size()));
  }
  if (query.plan && !is_known_plan(config, *query.plan)) {
    return bad_request(
        "unknown plan: not in plans (or, without that list, not api_keys.default_plan, the plan "
        "of a consumer nor a plan of a limit)");
  }
  SyntheticRequest request;
  std::size_t next = 0;
  for (const KeySource& source : limit->key) {
    if (source.kind == KeySource::Kind::kGlobal) continue;
    if (auto error = place(request, config, source, query.values[next], next)) return *error;
    ++next;
  }
  std::optional<std::string_view> plan;
  if (query.plan) plan = *query.plan;
  const RequestView view = request.view();
  Identity identity = identify(view, config.api_keys);
  // A store consumer's key is keyed by its consumer, as on the data plane.
  if (needs_store(identity, config.api_keys)) {
    if (!stored) return StoreQuestion{std::string(*identity.presented)};
    apply_store_consumer(identity, *stored);
  }
  if (!request.org.empty()) identity.org = request.org;
  RateLimitKeys keys = build_limit_descriptors({&*limit}, view, config.api_keys, identity,
                                               config.redis.key_secret, plan);
  if (keys.refusal) return bad_request(keys.refusal->message);
  if (keys.descriptors.size() != 1) return BucketRequestError{500, "no bucket built"};
  if (keys.values.front().fell_back) {
    return bad_request(
        "a request carrying the " +
        kind_name(KeySource{keys.values.front().missing_kind, keys.values.front().missing_name}) +
        " value would be keyed by its client IP (an API key that names no "
        "consumer?): no bucket of that value");
  }
  return BucketTarget{&*limit, std::move(keys.plan), std::move(keys.descriptors.front())};
}

nlohmann::ordered_json bucket_document(const BucketTarget& target, const BucketView& view) {
  const LimitDescriptor& d = target.descriptor;
  nlohmann::ordered_json doc;
  doc["limit"] = d.limit;
  doc["bucket"] = bucket_name(d);
  doc["plan"] = target.plan;
  const AlgorithmRow& algorithm = algorithm_row(d);
  doc["algorithm"] = algorithm_name(d.algorithm).name;
  algorithm.describe(doc, *target.limit, d);
  // Whether Redis holds the bucket: false for one never used or expired (full),
  // and for a value that names another bucket than the one meant.
  doc["exists"] = view.exists;
  algorithm.state_fields(doc, d, view);
  return doc;
}

}  // namespace sluice
