#include "middleware/ratelimit/consumers/consumer.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <set>

#include <fmt/format.h>

#include "common/hex.hpp"
#include "gateway/config/text.hpp"
#include "middleware/ratelimit/algorithms/algorithm.hpp"
#include "middleware/ratelimit/descriptors.hpp"

namespace sluice {
namespace {

using json = nlohmann::json;

constexpr double kMaxParameter = 1e15;
constexpr double kMaxWindowMs = 2147483647;  // as the configuration allows

std::string algorithm_fields(const LimitConfig& limit) {
  return std::string(algorithm_name(limit.algorithm).fields);
}

// A positive finite number, at most kMaxParameter (or a whole number of
// milliseconds for window_ms).
std::optional<std::string> parameter_problem(const json& value, bool whole_ms) {
  if (!value.is_number()) return "expected a number";
  const double v = value.get<double>();
  if (!std::isfinite(v) || v <= 0) return "must be greater than 0";
  if (whole_ms) {
    if (v != std::floor(v) || v > kMaxWindowMs) {
      return "must be a whole number of milliseconds, at most 2147483647";
    }
  } else if (v > kMaxParameter) {
    return "must be at most 1e15";
  }
  return std::nullopt;
}

std::variant<LimitOverride, BodyProblem> read_override(const json& value, const LimitConfig& limit,
                                                       const std::string& field) {
  if (!value.is_object()) return BodyProblem{field, "expected an object"};
  LimitOverride out;
  for (const auto& [name, v] : value.items()) {
    const std::string at = field + "." + name;
    const bool bucket_field = name == "refill_per_second";
    const bool window_field = name == "window_ms";
    if (name != "capacity" && !bucket_field && !window_field) {
      return BodyProblem{at, "unknown field; limit " + limit.name + " is " + algorithm_fields(limit)};
    }
    if (name != "capacity" && name != algorithm_name(limit.algorithm).rate_field) {
      return BodyProblem{at, "limit " + limit.name + " is " + algorithm_fields(limit)};
    }
    if (auto problem = parameter_problem(v, window_field)) return BodyProblem{at, *problem};
    const double number = v.get<double>();
    const double max_capacity = algorithm_row(limit).max_capacity;
    if (name == "capacity" && max_capacity > 0 && number > max_capacity) {
      return BodyProblem{at, "must be at most " + std::to_string(std::llround(max_capacity)) +
                                 " for limit " + limit.name + " (" +
                                 std::string(algorithm_name(limit.algorithm).name) + ")"};
    }
    if (name == "capacity") out.capacity = number;
    if (bucket_field) out.refill_per_second = number;
    if (window_field) out.window_seconds = number / 1000.0;
  }
  if (out == LimitOverride{}) return BodyProblem{field, "names no field to override"};
  return out;
}

std::optional<BodyProblem> read_keys(const json& value, const std::string& secret,
                                     StoredConsumer& out) {
  if (!value.is_array()) return BodyProblem{"keys", "expected a list of keys"};
  if (value.empty() || value.size() > kMaxConsumerKeys) {
    return BodyProblem{"keys", "must hold 1 to " + std::to_string(kMaxConsumerKeys) + " keys"};
  }
  std::set<std::string> seen;
  out.key_fingerprints.clear();
  for (std::size_t i = 0; i < value.size(); ++i) {
    const std::string at = "keys[" + std::to_string(i) + "]";
    if (!value[i].is_string()) return BodyProblem{at, "expected a string"};
    const auto& key = value[i].get_ref<const std::string&>();
    if (auto problem = config::api_key_problem(key)) return BodyProblem{at, *problem};
    std::string fingerprint = key_fingerprint(key, secret);
    if (!seen.insert(fingerprint).second) return BodyProblem{at, "the same key is listed twice"};
    out.key_fingerprints.push_back(std::move(fingerprint));
  }
  return std::nullopt;
}

std::string rfc3339_ms(std::int64_t ms) {
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000);
}

}  // namespace

std::string key_fingerprint(std::string_view key, std::string_view secret) {
  std::string input = "consumer-key:";
  input += key;
  std::string out;
  hex::append(out, key_hash(input, secret));
  return out;
}

bool is_key_fingerprint(std::string_view s) {
  return s.size() == 32 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::variant<StoredConsumer, BodyProblem> read_consumer_body(std::string_view body,
                                                             const Config& config,
                                                             std::string_view path_id) {
  const json doc = json::parse(body, nullptr, false);
  if (doc.is_discarded()) return BodyProblem{"", "the body is not valid JSON"};
  if (!doc.is_object()) return BodyProblem{"", "the body must be a JSON object"};
  StoredConsumer out;
  out.id = std::string(path_id);
  bool has_keys = false, has_plan = false;
  for (const auto& [name, value] : doc.items()) {
    if (name == "id") {
      if (!value.is_string()) return BodyProblem{"id", "expected a string"};
      const auto& id = value.get_ref<const std::string&>();
      if (!path_id.empty()) {
        if (id != path_id) return BodyProblem{"id", "differs from the id in the path"};
        continue;
      }
      if (auto problem = config::consumer_id_problem(id)) return BodyProblem{"id", *problem};
      out.id = id;
    } else if (name == "keys") {
      if (auto problem = read_keys(value, config.redis.key_secret, out)) return *problem;
      has_keys = true;
    } else if (name == "plan") {
      if (!value.is_string()) return BodyProblem{"plan", "expected a string"};
      out.plan = value.get<std::string>();
      if (!is_known_plan(config, out.plan)) {
        return BodyProblem{"plan", "unknown plan " + config::shown(out.plan)};
      }
      has_plan = true;
    } else if (name == "limits") {
      if (!value.is_object()) return BodyProblem{"limits", "expected an object"};
      for (const auto& [limit_name, override_value] : value.items()) {
        const std::string at = "limits." + limit_name;
        const auto limit = std::find_if(config.limits.begin(), config.limits.end(),
                                        [&](const LimitConfig& l) { return l.name == limit_name; });
        if (limit == config.limits.end()) return BodyProblem{at, "unknown limit"};
        auto read = read_override(override_value, *limit, at);
        if (auto* problem = std::get_if<BodyProblem>(&read)) return *problem;
        out.limits[limit_name] = std::get<LimitOverride>(read);
      }
    } else if (name == "disabled") {
      if (!value.is_boolean()) return BodyProblem{"disabled", "expected true or false"};
      out.disabled = value.get<bool>();
    } else if (name == "org") {
      if (!value.is_string()) return BodyProblem{"org", "expected a string"};
      if (auto problem = config::consumer_id_problem(value.get_ref<const std::string&>())) {
        return BodyProblem{"org", *problem};
      }
      out.org = value.get<std::string>();
    } else {
      return BodyProblem{name.size() > 64 ? name.substr(0, 64) : name, "unknown field"};
    }
  }
  if (out.id.empty()) return BodyProblem{"id", "required"};
  out.bucket_value = "consumer " + out.id;
  if (!has_keys) return BodyProblem{"keys", "required"};
  if (!has_plan) return BodyProblem{"plan", "required"};
  return out;
}

std::string consumer_document(const StoredConsumer& consumer) {
  json limits = json::object();
  for (const auto& [name, o] : consumer.limits) {
    json fields = json::object();
    if (o.capacity) fields["capacity"] = *o.capacity;
    if (o.refill_per_second) fields["refill_per_second"] = *o.refill_per_second;
    if (o.window_seconds) fields["window_ms"] = std::llround(*o.window_seconds * 1000);
    limits[name] = std::move(fields);
  }
  std::vector<std::string> keys = consumer.key_fingerprints;
  std::sort(keys.begin(), keys.end());
  json doc = {{"plan", consumer.plan},
              {"limits", std::move(limits)},
              {"disabled", consumer.disabled},
              {"keys", std::move(keys)}};
  // Only when set: a consumer without one keeps the document it always had.
  if (!consumer.org.empty()) doc["org"] = consumer.org;
  return doc.dump();
}

std::optional<StoredConsumer> parse_consumer_document(std::string_view id, std::string_view doc,
                                                      std::int64_t updated_at_ms) {
  const json parsed = json::parse(doc, nullptr, false);
  const auto org = parsed.is_object() ? parsed.find("org") : parsed.end();
  const bool has_org = parsed.is_object() && org != parsed.end();
  if (parsed.is_discarded() || !parsed.is_object() || parsed.size() != (has_org ? 5u : 4u) ||
      (has_org && (!org->is_string() || org->get_ref<const std::string&>().empty()))) {
    return std::nullopt;
  }
  const auto plan = parsed.find("plan");
  const auto limits = parsed.find("limits");
  const auto disabled = parsed.find("disabled");
  const auto keys = parsed.find("keys");
  if (plan == parsed.end() || !plan->is_string() || plan->get_ref<const std::string&>().empty() ||
      limits == parsed.end() || !limits->is_object() || disabled == parsed.end() ||
      !disabled->is_boolean() || keys == parsed.end() || !keys->is_array() || keys->empty() ||
      keys->size() > kMaxConsumerKeys) {
    return std::nullopt;
  }
  StoredConsumer out;
  out.id = std::string(id);
  out.bucket_value = "consumer " + out.id;
  out.plan = plan->get<std::string>();
  if (has_org) out.org = org->get<std::string>();
  out.disabled = disabled->get<bool>();
  out.updated_at_ms = updated_at_ms;
  for (const auto& key : *keys) {
    if (!key.is_string() || !is_key_fingerprint(key.get_ref<const std::string&>())) {
      return std::nullopt;
    }
    out.key_fingerprints.push_back(key.get<std::string>());
  }
  for (const auto& [name, fields] : limits->items()) {
    if (!fields.is_object() || fields.empty()) return std::nullopt;
    LimitOverride o;
    for (const auto& [field, value] : fields.items()) {
      if (parameter_problem(value, field == "window_ms")) return std::nullopt;
      const double v = value.get<double>();
      if (field == "capacity") {
        o.capacity = v;
      } else if (field == "refill_per_second") {
        o.refill_per_second = v;
      } else if (field == "window_ms") {
        o.window_seconds = v / 1000.0;
      } else {
        return std::nullopt;
      }
    }
    out.limits[name] = o;
  }
  return out;
}

nlohmann::ordered_json consumer_json(const StoredConsumer& consumer) {
  nlohmann::ordered_json limits = nlohmann::ordered_json::object();
  for (const auto& [name, o] : consumer.limits) {
    nlohmann::ordered_json fields = nlohmann::ordered_json::object();
    if (o.capacity) fields["capacity"] = *o.capacity;
    if (o.refill_per_second) fields["refill_per_second"] = *o.refill_per_second;
    if (o.window_seconds) fields["window_ms"] = std::llround(*o.window_seconds * 1000);
    limits[name] = std::move(fields);
  }
  nlohmann::ordered_json out;
  out["id"] = consumer.id;
  out["plan"] = consumer.plan;
  if (!consumer.org.empty()) out["org"] = consumer.org;
  out["limits"] = std::move(limits);
  out["disabled"] = consumer.disabled;
  out["keys"] = consumer.key_fingerprints;
  out["updated_at"] = rfc3339_ms(consumer.updated_at_ms);
  return out;
}

BucketParams consumer_params(const LimitConfig& limit, const StoredConsumer& consumer,
                             std::string_view name) {
  BucketParams params = limit.for_plan(consumer.plan);
  const auto it = name.empty() ? consumer.limits.find(limit.name)
                               : consumer.limits.find(std::string(name));
  if (it == consumer.limits.end()) return params;
  // Only the fields of the limit's algorithm: a record written while the
  // limit had another one keeps an override this one does not have.
  const LimitOverride& o = it->second;
  const std::string_view rate_field = algorithm_name(limit.algorithm).rate_field;
  if (o.capacity) params.capacity = *o.capacity;
  if (o.refill_per_second && rate_field == "refill_per_second") {
    params.refill_per_second = *o.refill_per_second;
  }
  if (o.window_seconds && rate_field == "window_ms") params.window_seconds = *o.window_seconds;
  return params;
}

}  // namespace sluice
