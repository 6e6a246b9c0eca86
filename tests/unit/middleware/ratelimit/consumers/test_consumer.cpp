// The consumer store's record: PUT bodies read and checked against the
// configuration (each bad input names its field), the canonical document and
// its reading back, the admin JSON and a consumer's limit parameters.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <variant>

#include "middleware/ratelimit/consumers/consumer.hpp"
#include "middleware/ratelimit/consumers/consumer_subscription.hpp"

namespace consumer_test {

using sluice::BodyProblem;
using sluice::StoredConsumer;

sluice::Config store_config() {
  sluice::Config c;
  c.plans = {"free", "pro"};
  c.redis.key_secret = "0123456789abcdef0123456789abcdef";
  sluice::LimitConfig per_key;
  per_key.name = "per_key";
  per_key.bucket = {10, 1, 0};
  per_key.plans["pro"] = {100, 10, 0};
  sluice::LimitConfig per_minute;
  per_minute.name = "per_minute";
  per_minute.algorithm = sluice::LimitAlgorithm::kSlidingWindow;
  per_minute.bucket = {60, 0, 60};
  c.limits = {per_key, per_minute};
  return c;
}

StoredConsumer ok(std::string_view body, std::string_view id = "acme") {
  const auto config = store_config();
  auto read = sluice::read_consumer_body(body, config, id);
  if (auto* problem = std::get_if<BodyProblem>(&read)) FAIL(problem->field + ": " + problem->detail);
  return std::get<StoredConsumer>(read);
}

BodyProblem bad(std::string_view body, std::string_view id = "acme") {
  const auto config = store_config();
  auto read = sluice::read_consumer_body(body, config, id);
  REQUIRE(std::holds_alternative<BodyProblem>(read));
  return std::get<BodyProblem>(read);
}

}  // namespace consumer_test

using namespace consumer_test;

TEST_CASE("consumer body: a valid PUT is read, its keys fingerprinted", "[consumers]") {
  const auto c = ok(R"({"keys":["k-two","k-one"],"plan":"pro",
                        "limits":{"per_key":{"capacity":900},"per_minute":{"window_ms":30000}}})");
  CHECK(c.id == "acme");
  CHECK(c.plan == "pro");
  CHECK_FALSE(c.disabled);
  REQUIRE(c.key_fingerprints.size() == 2);
  const auto secret = store_config().redis.key_secret;
  CHECK(c.key_fingerprints[1] == sluice::key_fingerprint("k-one", secret));  // the body's order
  CHECK(sluice::key_fingerprint("k-one", secret).size() == 32);
  CHECK(sluice::key_fingerprint("k-one", secret) != sluice::key_fingerprint("k-one", "other"));
  CHECK(c.limits.at("per_key").capacity == 900);
  CHECK_FALSE(c.limits.at("per_key").refill_per_second);
  CHECK(c.limits.at("per_minute").window_seconds == 30);
  CHECK(c.bucket_value == "consumer acme");
  // The document never holds a raw key.
  const std::string doc = sluice::consumer_document(c);
  CHECK(doc.find("k-one") == std::string::npos);
}

TEST_CASE("consumer body: bad input names its field", "[consumers]") {
  CHECK(bad("not json").detail == "the body is not valid JSON");
  CHECK(bad("[1]").detail == "the body must be a JSON object");
  CHECK(bad(R"({"plan":"pro"})").field == "keys");
  CHECK(bad(R"({"keys":["k"]})").field == "plan");
  CHECK(bad(R"({"keys":[],"plan":"pro"})").field == "keys");
  std::string seventeen = R"({"plan":"pro","keys":[)";
  for (int i = 0; i < 17; ++i) seventeen += (i ? ",\"k" : "\"k") + std::to_string(i) + "\"";
  CHECK(bad(seventeen + "]}").field == "keys");
  CHECK(bad(R"({"keys":["a",""],"plan":"pro"})").field == "keys[1]");
  CHECK(bad(R"({"keys":["a b"],"plan":"pro"})").field == "keys[0]");
  CHECK(bad(R"({"keys":["a\u0001"],"plan":"pro"})").field == "keys[0]");
  CHECK(bad(R"({"keys":[")" + std::string(257, 'k') + R"("],"plan":"pro"})").field == "keys[0]");
  CHECK(bad(R"({"keys":["a","a"],"plan":"pro"})").detail == "the same key is listed twice");
  CHECK(bad(R"({"keys":[1],"plan":"pro"})").field == "keys[0]");
  CHECK(bad(R"({"keys":"a","plan":"pro"})").field == "keys");
  CHECK(bad(R"({"keys":["a"],"plan":"gold"})").field == "plan");
  CHECK(bad(R"({"keys":["a"],"plan":7})").field == "plan");
  CHECK(bad(R"({"keys":["a"],"plan":"pro","limits":{"nope":{"capacity":1}}})").field ==
        "limits.nope");
  CHECK(bad(R"({"keys":["a"],"plan":"pro","limits":{"per_key":{"window_ms":1000}}})").field ==
        "limits.per_key.window_ms");
  CHECK(bad(R"({"keys":["a"],"plan":"pro","limits":{"per_minute":{"refill_per_second":1}}})")
            .field == "limits.per_minute.refill_per_second");
  CHECK(bad(R"({"keys":["a"],"plan":"pro","limits":{"per_key":{"capacity":0}}})").field ==
        "limits.per_key.capacity");
  CHECK(bad(R"({"keys":["a"],"plan":"pro","limits":{"per_key":{"capacity":"9"}}})").field ==
        "limits.per_key.capacity");
  CHECK(bad(R"({"keys":["a"],"plan":"pro","limits":{"per_minute":{"window_ms":1.5}}})").field ==
        "limits.per_minute.window_ms");
  CHECK(bad(R"({"keys":["a"],"plan":"pro","limits":{"per_key":{}}})").field == "limits.per_key");
  CHECK(bad(R"({"keys":["a"],"plan":"pro","disabled":"yes"})").field == "disabled");
  CHECK(bad(R"({"keys":["a"],"plan":"pro","colour":"red"})").field == "colour");
  CHECK(bad(R"({"keys":["a"],"plan":"pro","id":"other"})").field == "id");
}

TEST_CASE("consumer body: an import line carries its id", "[consumers]") {
  CHECK(ok(R"({"id":"line-1","keys":["a"],"plan":"free"})", "").id == "line-1");
  CHECK(bad(R"({"keys":["a"],"plan":"free"})", "").field == "id");
  for (const char* id : {"a/b", "..", "a b", ""}) {
    INFO(id);
    CHECK(bad(std::string(R"({"keys":["a"],"plan":"free","id":")") + id + "\"}", "").field == "id");
  }
  CHECK(bad(R"({"keys":["a"],"plan":"free","id":")" + std::string(129, 'i') + "\"}", "").field ==
        "id");
}

TEST_CASE("consumer document: canonical, read back, damage refused", "[consumers]") {
  auto c = ok(R"({"keys":["a","b"],"plan":"pro","disabled":true,
                  "limits":{"per_key":{"capacity":900,"refill_per_second":0.5}}})");
  // The same consumer written another way gives the same document.
  const auto same = ok(R"({"limits":{"per_key":{"refill_per_second":0.5,"capacity":900}},
                           "disabled":true,"plan":"pro","keys":["b","a"]})");
  const std::string doc = sluice::consumer_document(c);
  CHECK(doc == sluice::consumer_document(same));
  const auto back = sluice::parse_consumer_document("acme", doc, 1764300000123);
  REQUIRE(back);
  CHECK(back->plan == "pro");
  CHECK(back->disabled);
  auto sorted = c.key_fingerprints;
  std::sort(sorted.begin(), sorted.end());
  CHECK(back->key_fingerprints == sorted);
  CHECK(back->limits.at("per_key") == c.limits.at("per_key"));
  CHECK(back->bucket_value == "consumer acme");
  const auto json = sluice::consumer_json(*back);
  CHECK(json["updated_at"] == "2025-11-28T03:20:00.123Z");
  CHECK(json["limits"]["per_key"]["capacity"] == 900);
  CHECK(json["keys"].size() == 2);
  for (const char* damaged :
       {"", "{}", "[]", R"({"plan":"pro","limits":{},"disabled":false,"keys":["zz"]})",
        R"({"plan":"","limits":{},"disabled":false,"keys":["00000000000000000000000000000000"]})",
        R"({"plan":"pro","limits":{"x":{"capacity":-1}},"disabled":false,"keys":["00000000000000000000000000000000"]})",
        R"({"plan":"pro","limits":{},"disabled":0,"keys":["00000000000000000000000000000000"]})"}) {
    INFO(damaged);
    CHECK_FALSE(sluice::parse_consumer_document("acme", damaged, 0));
  }
}

TEST_CASE("consumer params: the plan's, then the consumer's override", "[consumers]") {
  const auto config = store_config();
  const auto c = ok(R"({"keys":["a"],"plan":"pro","limits":{"per_key":{"capacity":900}}})");
  const auto params = sluice::consumer_params(config.limits[0], c);
  CHECK(params.capacity == 900);
  CHECK(params.refill_per_second == 10);  // the pro plan's
  CHECK(sluice::consumer_params(config.limits[1], c).window_seconds == 60);
  // A record written while a limit had another algorithm keeps an override
  // the limit's algorithm does not have: it is not applied.
  auto stale = c;
  stale.limits["per_key"].window_seconds = 5;  // per_key is a token bucket
  stale.limits[config.limits[1].name].refill_per_second = 99;  // a sliding window
  CHECK(sluice::consumer_params(config.limits[0], stale).window_seconds == 0);
  CHECK(sluice::consumer_params(config.limits[1], stale).refill_per_second == 0);
  CHECK(sluice::consumer_params(config.limits[1], stale).window_seconds == 60);
}

TEST_CASE("consumer store: change events name the keys to forget", "[consumers]") {
  const std::string fp1(32, 'a');
  const std::string fp2 = "0123456789abcdef0123456789abcdef";
  CHECK(sluice::parse_change_event("acme " + fp1 + " " + fp2) ==
        std::vector<std::string>{fp1, fp2});
  CHECK(sluice::parse_change_event("acme ") == std::vector<std::string>{});
  CHECK(sluice::parse_change_event("acme") == std::vector<std::string>{});
  CHECK_FALSE(sluice::parse_change_event(""));
  CHECK_FALSE(sluice::parse_change_event(" " + fp1));
  CHECK_FALSE(sluice::parse_change_event("acme " + fp1 + "X"));
  CHECK_FALSE(sluice::parse_change_event("acme " + std::string(32, 'A')));
}
