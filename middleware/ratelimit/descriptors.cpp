#include "middleware/ratelimit/descriptors.hpp"

#include <algorithm>
#include <string>

#include "common/ascii.hpp"
#include "common/hex.hpp"
#include "middleware/ratelimit/algorithms/algorithm.hpp"
#include "middleware/ratelimit/algorithms/concurrency.hpp"
#include "middleware/ratelimit/algorithms/quota_calendar.hpp"
#include "upstream/redis/redis_clock.hpp"

namespace sluice {
namespace {

KeyRefusal duplicate_header(std::string_view name) {
  return {KeyRefusal::Reason::kDuplicateIdentity, "more than one " + std::string(name) + " header"};
}

KeyRefusal duplicate_query_param(std::string_view name) {
  return {KeyRefusal::Reason::kDuplicateIdentity,
          "query parameter " + std::string(name) + " given more than once"};
}

// Appends "<length>:<bytes>" so that consecutive fields cannot run together.
void append_field(std::string& out, std::string_view bytes) {
  out += std::to_string(bytes.size());
  out += ':';
  out += bytes;
}

char kind_tag(KeySource::Kind kind) {
  switch (kind) {
    case KeySource::Kind::kApiKey:
      return 'k';
    case KeySource::Kind::kIp:
      return 'i';
    case KeySource::Kind::kPath:
      return 'p';
    case KeySource::Kind::kRoute:
      return 'r';
    case KeySource::Kind::kGlobal:
      return 'g';
    case KeySource::Kind::kHeader:
      return 'h';
    case KeySource::Kind::kQuery:
      return 'q';
    case KeySource::Kind::kJwt:
      return 'j';
    case KeySource::Kind::kCert:
      return 'c';
    case KeySource::Kind::kOrg:
      return 'o';
    case KeySource::Kind::kBody:
      return 'b';
  }
  return '?';
}

void append_ip(std::string& out, const IpAddress& client, unsigned ipv6_prefix) {
  const IpAddress ip = ip_key_address(client, ipv6_prefix);
  out += kind_tag(KeySource::Kind::kIp);
  append_field(out,
               std::string_view(reinterpret_cast<const char*>(ip.bytes.data()), ip.bytes.size()));
}

}  // namespace

std::string_view key_source_name(KeySource::Kind kind) {
  switch (kind) {
    case KeySource::Kind::kApiKey:
      return "api_key";
    case KeySource::Kind::kIp:
      return "ip";
    case KeySource::Kind::kPath:
      return "path";
    case KeySource::Kind::kRoute:
      return "route";
    case KeySource::Kind::kGlobal:
      return "global";
    case KeySource::Kind::kHeader:
      return "header";
    case KeySource::Kind::kQuery:
      return "query";
    case KeySource::Kind::kJwt:
      return "jwt";
    case KeySource::Kind::kCert:
      return "cert";
    case KeySource::Kind::kOrg:
      return "org";
    case KeySource::Kind::kBody:
      return "body";
  }
  return "unknown";
}

IpAddress ip_key_address(const IpAddress& client, unsigned ipv6_prefix) {
  if (client.is_v4() || ipv6_prefix >= 128) return client;
  IpAddress network = client;
  const unsigned full_bytes = ipv6_prefix / 8;
  const unsigned rest_bits = ipv6_prefix % 8;
  auto it = network.bytes.begin() + full_bytes;
  if (rest_bits != 0) {
    *it = static_cast<std::uint8_t>(*it & (0xff << (8 - rest_bits)));
    ++it;
  }
  std::fill(it, network.bytes.end(), std::uint8_t{0});
  return network;
}

std::optional<KeyRefusal> check_identity(const std::vector<const LimitConfig*>& limits,
                                         const RequestView& request, const ApiKeysConfig& api_keys,
                                         const Identity& identity) {
  bool keys_on_api_key = false;
  for (const LimitConfig* limit : limits) {
    if (limit == nullptr) continue;
    // The API key also picks the plan, so plan overrides depend on it too.
    if (!limit->plans.empty()) {
      keys_on_api_key = true;
      if (identity.key_lines > 1) return duplicate_header(api_keys.header);
    }
    for (const KeySource& source : limit->key) {
      switch (source.kind) {
        case KeySource::Kind::kApiKey:
          keys_on_api_key = true;
          if (identity.key_lines > 1) return duplicate_header(api_keys.header);
          break;
        case KeySource::Kind::kHeader:
          if (count_header(request, source.name) > 1) return duplicate_header(source.name);
          break;
        case KeySource::Kind::kQuery:
          if (query_param_count(request.query, source.name) > 1) {
            return duplicate_query_param(source.name);
          }
          break;
        default:
          break;
      }
    }
  }
  if (keys_on_api_key && identity.malformed) {
    return KeyRefusal{KeyRefusal::Reason::kMalformedAuthorization,
                      "malformed Authorization header"};
  }
  return std::nullopt;
}

LimitKeyValue limit_key_value(const LimitConfig& limit, const RequestView& request,
                              std::optional<std::string_view> api_key, std::string_view org) {
  LimitKeyValue result;
  limit_key_value(result, limit, request, api_key, org);
  return result;
}

void limit_key_value(LimitKeyValue& result, const LimitConfig& limit, const RequestView& request,
                     std::optional<std::string_view> api_key, std::string_view org) {
  result.hash_input.clear();
  result.fell_back = false;
  result.missing_kind = KeySource::Kind::kIp;
  result.missing_name.clear();
  std::string& out = result.hash_input;
  auto fall_back = [&](const KeySource& source) {
    if (!result.fell_back) {
      result.fell_back = true;
      result.missing_kind = source.kind;
      result.missing_name = source.name;
    }
    append_ip(out, request.client_ip, limit.ipv6_prefix);
  };
  // A part named in the config (a query parameter, a claim, a certificate
  // field): its name and value, or the fallback when it is missing or empty.
  auto append_named = [&](const KeySource& source, std::optional<std::string_view> value) {
    if (!value || value->empty()) return fall_back(source);
    out += kind_tag(source.kind);
    append_field(out, source.name);
    append_field(out, *value);
  };

  for (const KeySource& source : limit.key) {
    switch (source.kind) {
      case KeySource::Kind::kApiKey:
        if (!api_key || api_key->empty()) {
          fall_back(source);
        } else {
          out += kind_tag(source.kind);
          append_field(out, *api_key);
        }
        break;
      case KeySource::Kind::kIp:
        append_ip(out, request.client_ip, limit.ipv6_prefix);
        break;
      case KeySource::Kind::kOrg:
        if (org.empty()) {
          fall_back(source);
        } else {
          out += kind_tag(source.kind);
          append_field(out, org);
        }
        break;
      case KeySource::Kind::kPath:
        out += kind_tag(source.kind);
        append_field(out, request.path);
        break;
      case KeySource::Kind::kRoute:
        out += kind_tag(source.kind);
        append_field(out, request.route);
        break;
      case KeySource::Kind::kGlobal:
        out += kind_tag(source.kind);
        append_field(out, {});
        break;
      case KeySource::Kind::kHeader: {
        std::optional<std::string_view> value = lookup_header(request, source.name);
        if (value) value = ascii::trim(*value);
        if (!value || value->empty()) {
          fall_back(source);
        } else {
          std::string name(source.name);
          ascii::to_lower_in_place(name);
          out += kind_tag(source.kind);
          append_field(out, name);
          append_field(out, *value);
        }
        break;
      }
      case KeySource::Kind::kJwt:
        append_named(source, lookup_claim(request, source.name));
        break;
      case KeySource::Kind::kCert:
        append_named(source, request.cert ? request.cert->field(source.name) : std::nullopt);
        break;
      case KeySource::Kind::kQuery: {
        const std::optional<std::string> value = query_param(request.query, source.name);
        append_named(source, value ? std::optional<std::string_view>(*value) : std::nullopt);
        break;
      }
      case KeySource::Kind::kBody: {
        // A body without the member (not JSON, cut at max_inspect_bytes, or
        // lacking it) shares one value, "missing", rather than the client
        // IP: padding a body cannot buy a bucket per address.
        const auto value = lookup_body_field(request, source.name);
        out += kind_tag(source.kind);
        append_field(out, source.name);
        if (!value || value->empty()) {
          out += '-';  // no length prefix: never equal to a value's field
          if (!result.fell_back) {
            result.fell_back = true;
            result.missing_kind = source.kind;
            result.missing_name = source.name;
          }
        } else {
          append_field(out, *value);
        }
        break;
      }
    }
  }
}

std::size_t bucket_name_size(const LimitDescriptor& descriptor) {
  return descriptor.limit.size() + 1 + 2 * descriptor.key_hash.size();
}

void append_bucket_name(std::string& out, const LimitDescriptor& descriptor) {
  out += descriptor.limit;
  out += ':';
  hex::append(out, descriptor.key_hash);
}

std::string bucket_name(const LimitDescriptor& descriptor) {
  std::string name;
  name.reserve(bucket_name_size(descriptor));
  append_bucket_name(name, descriptor);
  return name;
}

bool route_limits(const RouteConfig& route) {
  return !route.limit_indexes.empty();
}

namespace {

void set_client_headers(LimitDescriptor& descriptor, ClientHeaders shown) {
  descriptor.show_legacy = shown == ClientHeaders::kAll || shown == ClientHeaders::kLegacy;
  descriptor.show_ietf = shown == ClientHeaders::kAll || shown == ClientHeaders::kIetf;
}

// A quota's periods around the store's time now (redis_clock.hpp).
QuotaPeriods quota_periods_now(const LimitConfig& limit) {
  return current_periods(limit, redis::server_now_us());
}

}  // namespace

LimitDescriptor limit_descriptor(const LimitConfig& limit, const BucketParams& params,
                                 KeyHash hash) {
  LimitDescriptor descriptor{limit.name, hash, params.capacity, params.refill_per_second};
  descriptor.lease_tokens = limit.lease_tokens;
  descriptor.algorithm = limit.algorithm;
  descriptor.window_seconds = params.window_seconds;  // 0 but for a window
  if (descriptor.algorithm == LimitAlgorithm::kQuota) {
    descriptor.periods = quota_periods_now(limit);
  } else if (descriptor.algorithm == LimitAlgorithm::kConcurrency) {
    descriptor.slot = next_slot_number();
    descriptor.lease_ms = static_cast<double>(limit.lease.count());
  } else if (descriptor.algorithm == LimitAlgorithm::kSlidingLog) {
    descriptor.slot = next_slot_number();  // names the units this request logs
  }
  descriptor.shadow = limit.shadow;
  set_client_headers(descriptor, limit.client_headers);
  return descriptor;
}

RateLimitKeys build_limit_descriptors(const std::vector<const LimitConfig*>& limits,
                                      const RequestView& request, const ApiKeysConfig& api_keys,
                                      const Identity& identity, std::string_view key_secret,
                                      std::optional<std::string_view> plan,
                                      std::vector<LimitDescriptor> reuse) {
  RateLimitKeys result;
  result.refusal = check_identity(limits, request, api_keys, identity);
  if (result.refusal) return result;
  result.descriptors = std::move(reuse);
  result.descriptors.clear();
  result.plan = std::string(plan.value_or(identity.plan));
  result.has_api_key = identity.key.has_value();
  result.descriptors.reserve(limits.size());
  // The key value is built in a buffer the thread keeps (no allocation per
  // request), and wiped once hashed: raw request data is not kept.
  thread_local LimitKeyValue value;
  struct Wipe {  // also when something below throws
    std::string& text;
    ~Wipe() {
      std::fill(text.begin(), text.end(), '\0');
      text.clear();
    }
  };
  for (const LimitConfig* limit : limits) {
    const Wipe wipe{value.hash_input};
    if (limit == nullptr) continue;
    limit_key_value(value, *limit, request, identity.key, identity.org);
    // An organisation's bucket is the organisation's, whoever of its
    // consumers calls: the limit's own size, not a plan's or a consumer's.
    const bool per_org = std::any_of(limit->key.begin(), limit->key.end(), [](const KeySource& k) {
      return k.kind == KeySource::Kind::kOrg;
    });
    BucketParams params = per_org ? limit->bucket
                          : plan  ? limit->for_plan(result.plan)
                                  : identity_params(*limit, identity);
    if (!limit->models.empty() && !per_org) {
      if (const auto* model = model_entry(*limit, request)) {
        const auto it = model->plans.find(result.plan);
        params = it == model->plans.end() ? model->bucket : it->second;
      }
    }
    result.descriptors.push_back(
        limit_descriptor(*limit, params, bucket_key_hash(value.hash_input, key_secret)));
    result.values.push_back(
        LimitKeyValue{{}, value.fell_back, value.missing_kind, value.missing_name});
  }
  return result;
}

RateLimitKeys build_route_descriptors(const Config& config, const RouteConfig& route,
                                      const RequestView& request, const Identity& identity,
                                      std::vector<LimitDescriptor> reuse) {
  thread_local std::vector<const LimitConfig*> limits;  // reused: no allocation per request
  limits.clear();
  if (route.limit_indexes.size() == route.limits.size()) {
    for (std::size_t index : route.limit_indexes) {
      if (index < config.limits.size()) limits.push_back(&config.limits[index]);
    }
  } else {
    // Indexes not resolved (a hand-built config): look the names up.
    for (const std::string& name : route.limits) {
      auto it = std::find_if(config.limits.begin(), config.limits.end(),
                             [&](const LimitConfig& limit) { return limit.name == name; });
      if (it != config.limits.end()) limits.push_back(&*it);
    }
  }
  RateLimitKeys keys = build_limit_descriptors(limits, request, config.api_keys, identity,
                                               config.redis.key_secret, std::nullopt,
                                               std::move(reuse));
  if (route.client_headers) {
    for (LimitDescriptor& d : keys.descriptors) set_client_headers(d, *route.client_headers);
  }
  return keys;
}

std::vector<LimitDescriptor> with_quota_periods_now(std::vector<LimitDescriptor> descriptors,
                                                    const Config& config) {
  for (LimitDescriptor& d : descriptors) {
    if (d.algorithm != LimitAlgorithm::kQuota) continue;
    const auto limit = std::find_if(config.limits.begin(), config.limits.end(),
                                    [&](const LimitConfig& l) { return l.name == d.limit; });
    if (limit != config.limits.end()) d.periods = quota_periods_now(*limit);
  }
  return descriptors;
}

}  // namespace sluice
