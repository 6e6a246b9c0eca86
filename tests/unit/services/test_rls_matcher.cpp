// Matching a request's descriptor against a domain's tree, as
// envoyproxy/ratelimit does: exact values first, then wildcards in order,
// then the key alone; the last entry must end at a rule with a limit.
#include <catch2/catch.hpp>

#include "services/rls/rls_matcher.hpp"

namespace sluice {
namespace {

RlsRule node(std::string key, std::string value = {}, bool limited = true) {
  RlsRule rule;
  rule.key = std::move(key);
  rule.value = std::move(value);
  rule.wildcard = rule.value.find('*') != std::string::npos;
  if (limited) rule.limit = std::make_shared<LimitConfig>();
  rule.stat_key = "d." + rule.key + (rule.value.empty() ? "" : "_" + rule.value);
  return rule;
}

RlsDomain domain() {
  RlsDomain d;
  d.domain = "d";
  d.descriptors.push_back(node("ip"));
  d.descriptors.push_back(node("ip", "50.0.0.5"));
  d.descriptors.push_back(node("path", "/api/*/action"));
  RlsRule files = node("files", "files/*");
  files.share_threshold = true;
  d.descriptors.push_back(files);
  RlsRule parent = node("svc", "", false);
  parent.children.push_back(node("user"));
  RlsRule detailed = node("user", "vip");
  detailed.detailed_metric = true;
  parent.children.push_back(detailed);
  d.descriptors.push_back(parent);
  return d;
}

const RlsRule* rule_of(const RlsDomain& d, std::initializer_list<RlsEntry> entries) {
  const std::vector<RlsEntry> list(entries);
  return match_rls_descriptor(d, list).rule;
}

}  // namespace

TEST_CASE("rls: the most specific node of each level wins", "[rls]") {
  const RlsDomain d = domain();
  CHECK(rule_of(d, {{"ip", "50.0.0.5"}}) == &d.descriptors[1]);
  CHECK(rule_of(d, {{"ip", "50.0.0.6"}}) == &d.descriptors[0]);
  CHECK(rule_of(d, {{"path", "/api/7/action"}}) == &d.descriptors[2]);
  CHECK(rule_of(d, {{"path", "/api/7/other"}}) == nullptr);
  CHECK(rule_of(d, {{"svc", "a"}, {"user", "bob"}}) == &d.descriptors[4].children[0]);
  CHECK(rule_of(d, {{"svc", "a"}, {"user", "vip"}}) == &d.descriptors[4].children[1]);
  // A node without a limit ends nothing; more entries than levels match nothing.
  CHECK(rule_of(d, {{"svc", "a"}}) == nullptr);
  CHECK(rule_of(d, {{"ip", "1.1.1.1"}, {"user", "x"}}) == nullptr);
  CHECK(rule_of(d, {{"nope", "1"}}) == nullptr);
}

TEST_CASE("rls: buckets and metric keys", "[rls]") {
  const RlsDomain d = domain();
  const std::vector<RlsEntry> a = {{"ip", "1.1.1.1"}};
  const std::vector<RlsEntry> b = {{"ip", "1.1.1.2"}};
  CHECK(match_rls_descriptor(d, a).bucket_input != match_rls_descriptor(d, b).bucket_input);
  CHECK(match_rls_descriptor(d, a).metric_key == "d.ip");
  // share_threshold: every value of the pattern shares one bucket.
  const std::vector<RlsEntry> f1 = {{"files", "files/a.pdf"}};
  const std::vector<RlsEntry> f2 = {{"files", "files/b.csv"}};
  CHECK(match_rls_descriptor(d, f1).bucket_input == match_rls_descriptor(d, f2).bucket_input);
  // Values cannot run together into another descriptor's bucket.
  const std::vector<RlsEntry> split1 = {{"svc", "a:b"}, {"user", "c"}};
  const std::vector<RlsEntry> split2 = {{"svc", "a"}, {"user", "b:c"}};
  CHECK(match_rls_descriptor(d, split1).bucket_input !=
        match_rls_descriptor(d, split2).bucket_input);
  const std::vector<RlsEntry> vip = {{"svc", "a"}, {"user", "vip"}};
  CHECK(match_rls_descriptor(d, vip).metric_key == "d.svc.user_vip");
}

TEST_CASE("rls: wildcards", "[rls]") {
  CHECK(rls_wildcard_match("value*", "value1"));
  CHECK(rls_wildcard_match("value*", "value"));
  CHECK_FALSE(rls_wildcard_match("value*", "valu"));
  CHECK(rls_wildcard_match("/api/*/resource/*/action", "/api/v1/resource/123/action"));
  CHECK_FALSE(rls_wildcard_match("/api/*/resource/*/action", "/api/v1/resource/123/other"));
  CHECK(rls_wildcard_match("*", ""));
  CHECK(rls_wildcard_match("a*b*c", "aXbYbZc"));
  CHECK_FALSE(rls_wildcard_match("a*b*c", "aXbYbZ"));
}

}  // namespace sluice

namespace sluice {

TEST_CASE("rls: an api_key entry and a concurrency rule's request id", "[rls]") {
  RlsDomain d;
  d.domain = "d";
  RlsRule key = node("api_key", "", false);
  key.api_key = true;
  RlsRule slots = node("request_id");
  auto concurrency = std::make_shared<LimitConfig>();
  concurrency->algorithm = LimitAlgorithm::kConcurrency;
  slots.limit = concurrency;
  key.children.push_back(slots);
  key.children.push_back(node("path"));
  d.descriptors.push_back(key);

  // The API key's entry is found, at its place.
  const std::vector<RlsEntry> by_path = {{"api_key", "k1"}, {"path", "/a"}};
  const RlsMatch path = match_rls_descriptor(d, by_path);
  CHECK(path.rule == &d.descriptors[0].children[1]);
  CHECK(path.api_key_entry == 0);
  CHECK(path.slot_name.empty());
  CHECK_FALSE(path.release);

  // A concurrency rule: the bucket leaves the request's id out; its release
  // (the release entry after it) names the same bucket and slot.
  const std::vector<RlsEntry> r1 = {{"api_key", "k1"}, {"request_id", "r1"}};
  const std::vector<RlsEntry> r2 = {{"api_key", "k1"}, {"request_id", "r2"}};
  const std::vector<RlsEntry> r1_release = {
      {"api_key", "k1"}, {"request_id", "r1"}, {"release", "1"}};
  const RlsMatch take1 = match_rls_descriptor(d, r1);
  const RlsMatch take2 = match_rls_descriptor(d, r2);
  const RlsMatch give1 = match_rls_descriptor(d, r1_release);
  CHECK(take1.rule == &d.descriptors[0].children[0]);
  CHECK(take1.slot_name == "r1");
  CHECK_FALSE(take1.release);
  CHECK(take1.bucket_input == take2.bucket_input);
  CHECK(give1.rule == take1.rule);
  CHECK(give1.release);
  CHECK(give1.slot_name == "r1");
  CHECK(give1.bucket_input == take1.bucket_input);
  // Another caller's slots are another bucket.
  const std::vector<RlsEntry> other = {{"api_key", "k2"}, {"request_id", "r1"}};
  CHECK(match_rls_descriptor(d, other).bucket_input != take1.bucket_input);
  // A release entry after a rule that is not a concurrency limit matches nothing.
  const std::vector<RlsEntry> not_slots = {{"api_key", "k1"}, {"path", "/a"}, {"release", "1"}};
  CHECK(match_rls_descriptor(d, not_slots).rule == nullptr);
}

}  // namespace sluice
