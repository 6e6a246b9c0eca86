// api_keys: the header that carries an API key, the known consumers and their
// plans, and the plan of every other key.
#include <algorithm>
#include <unordered_map>

#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"

namespace sluice::config {
namespace {

constexpr std::size_t kMaxConsumerKeyBytes = 256;

// The key itself never appears in a message: errors are logged.
void read_consumer(YamlReader& r, const Field& item, ApiKeysConfig& a, ReadNotes& notes,
                   std::unordered_map<std::string, int>& first_line) {
  const auto cm = r.mapping(item, kConsumerKeys.keys);
  if (!cm) return;
  Consumer consumer;
  const Field* key = r.required(*cm, "key");
  const Field* plan = r.required(*cm, "plan");
  if (plan) {
    Field plan_field = *plan;
    plan_field.secret = false;  // a plan name is not a secret
    if (auto s = r.nonempty_string(plan_field)) {
      consumer.plan = *s;
      notes.consumer_plans.insert(*s);
    }
  }
  if (!key) return;
  auto s = r.nonempty_string(*key);
  if (!s) return;
  if (s->size() > kMaxConsumerKeyBytes) {
    r.error(*key, "longer than " + std::to_string(kMaxConsumerKeyBytes) + " bytes");
    return;
  }
  if (std::any_of(s->begin(), s->end(),
                  [](char c) { return static_cast<unsigned char>(c) <= ' ' || c == 0x7f; })) {
    r.error(*key, "must not contain spaces or control characters");
    return;
  }
  const auto [it, inserted] = first_line.emplace(*s, key->line);
  if (!inserted) {
    r.error(*key, "duplicate consumer key (first at line " + std::to_string(it->second) + ")");
    return;
  }
  consumer.key = *s;
  a.plan_by_key[consumer.key] = consumer.plan;
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
    } else {
      notes.api_keys_read = false;
    }
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
