// api_keys: the header that carries an API key, the consumers listed here and
// their plans, the plan of every other key, and the consumer store in Redis
// (where consumers are also looked up, and how long a lookup is trusted).
#include <algorithm>
#include <unordered_map>

#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"
#include "gateway/config/values.hpp"

namespace sluice::config {
namespace {

// The key itself never appears in a message: errors are logged.
void read_consumer(YamlReader& r, const Field& item, ApiKeysConfig& a, ReadNotes& notes,
                   std::unordered_map<std::string, int>& first_line) {
  const auto cm = r.mapping(item, kConsumerKeys.keys);
  if (!cm) return;
  Consumer consumer;
  const Field* key = r.required(*cm, "key");
  const Field* plan = r.required(*cm, "plan");
  if (const Field* id = cm->get("id")) {
    Field id_field = *id;
    id_field.secret = false;  // an id is not a secret
    if (auto s = r.nonempty_string(id_field)) {
      if (auto problem = consumer_id_problem(*s)) {
        r.error(id_field, *problem);
      } else {
        consumer.id = *s;
      }
    }
  }
  if (const Field* org = cm->get("org")) {
    Field org_field = *org;
    org_field.secret = false;  // an organisation is not a secret
    if (auto s = r.nonempty_string(org_field)) {
      if (auto problem = consumer_id_problem(*s)) {
        r.error(org_field, *problem);
      } else {
        consumer.org = *s;
      }
    }
  }
  if (plan) {
    Field plan_field = *plan;
    plan_field.secret = false;  // a plan name is not a secret
    if (auto s = r.nonempty_string(plan_field)) {
      consumer.plan = *s;
      notes.consumer_plans.insert(*s);
      notes.consumer_plan_values.push_back(ReadValue{plan_field, r.here(), *s});
    }
  }
  if (!key) return;
  auto s = r.nonempty_string(*key);
  if (!s) return;
  if (auto problem = api_key_problem(*s)) {
    r.error(*key, *problem);
    return;
  }
  const auto [it, inserted] = first_line.emplace(*s, key->line);
  if (!inserted) {
    r.error(*key, "duplicate consumer key (first at line " + std::to_string(it->second) + ")");
    return;
  }
  consumer.key = *s;
  a.consumer_index[consumer.key] = a.consumers.size();
  a.consumers.push_back(std::move(consumer));
}

}  // namespace

void read_api_keys(YamlReader& r, const Field& f, Config& c, ReadNotes& notes) {
  const auto m = r.mapping(f, kApiKeysKeys.keys);
  if (!m) {
    notes.api_keys_read = false;
    return;
  }
  auto& a = c.api_keys;
  if (auto* v = m->get("header")) {
    if (auto s = r.nonempty_string(*v)) {
      if (is_token(*s)) {
        a.header = *s;
        notes.header_uses.push_back({*v, *s});
      } else {
        r.error(*v, "invalid header name " + shown(*s));
      }
    }
  }
  if (auto* v = m->get("default_plan")) {
    if (auto s = r.nonempty_string(*v)) {
      a.default_plan = *s;
      notes.default_plan = *v;
    } else {
      notes.api_keys_read = false;
    }
  }
  if (auto* v = m->get("store")) {
    if (auto s = r.string(*v)) {
      if (*s == "none") {
        a.store = ApiKeysConfig::Store::kNone;
      } else if (*s == "redis") {
        a.store = ApiKeysConfig::Store::kRedis;
        notes.store = *v;
      } else {
        r.error(*v, "unknown store " + shown(*s) + " (expected none or redis)");
      }
    }
  }
  if (auto* v = m->get("cache_ttl_ms")) {
    if (auto d = read_duration(r, *v)) a.cache_ttl = *d;
  }
  if (auto* v = m->get("unknown_cache_ttl_ms")) {
    if (auto d = read_duration(r, *v)) a.unknown_cache_ttl = *d;
  }
  if (auto* v = m->get("cache_max_entries")) {
    if (auto n = r.integer(*v, 1, 100'000'000)) a.cache_max_entries = static_cast<std::size_t>(*n);
  }
  if (auto* v = m->get("unknown_key")) {
    if (auto s = r.string(*v)) {
      if (*s == "missing") {
        a.unknown_key = ApiKeysConfig::UnknownKey::kMissing;
      } else if (*s == "reject") {
        a.unknown_key = ApiKeysConfig::UnknownKey::kReject;
      } else {
        r.error(*v, "unknown value " + shown(*s) + " (expected missing or reject)");
      }
    }
  }
  if (auto* v = m->get("forward_consumer")) {
    if (auto b = r.boolean(*v)) a.forward_consumer = *b;
  }
  if (const Field* given = m->get("consumers")) {
    Field consumers = *given;
    consumers.secret = true;  // API keys: never shown, down to the items' keys
    const auto items = r.list(consumers);
    if (!items) {
      notes.api_keys_read = false;
      return;
    }
    std::unordered_map<std::string, int> first_line;
    for (const auto& item : *items) read_consumer(r, item, a, notes, first_line);
  }
}

}  // namespace sluice::config
