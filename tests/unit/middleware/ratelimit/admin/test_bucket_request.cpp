// The bucket API's requests: reading the target, and naming the very bucket
// a request carrying the same values is decided on.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <variant>

#include "middleware/ratelimit/admin/bucket_request.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "support/config_text.hpp"
#include "support/redis_server_fixture.hpp"
#include "support/request_view_fixture.hpp"

namespace {

using sluice::BucketQuery;
using sluice::BucketRequestError;
using sluice::BucketTarget;
using sluice::testing::Request;

const std::string kConfig = R"(
redis:
  key_secret_file: KEY_SECRET
api_keys:
  header: Authorization
  default_plan: free
  consumers:
    - { key: "demo-pro-key", plan: pro }
limits:
  per_key:
    key: api_key
    capacity: 10
    refill_per_second: 1
    plans:
      pro: { capacity: 100, refill_per_second: 10 }
  per_ip:
    key: ip
    capacity: 5
    refill_per_second: 1
  per_key_path:
    key: [api_key, path]
    capacity: 5
    refill_per_second: 1
  per_tenant_user:
    key: ["header:X-User", "query:tenant"]
    capacity: 5
    refill_per_second: 1
  per_minute:
    key: api_key
    algorithm: sliding_window
    capacity: 60
    window_ms: 60000
  everyone:
    key: global
    capacity: 50
    refill_per_second: 5
upstreams:
  app:
    servers: ["127.0.0.1:9000"]
routes: []
)";

std::shared_ptr<const sluice::Config> config() {
  static const auto parsed = [] {
    // Buckets keyed under a secret, as in production.
    static sluice::test::TempDir dir;
    const std::string secret = dir.file("key_secret");
    std::ofstream(secret) << "0123456789abcdef-bucket-request\n";
    std::string text = kConfig;
    text.replace(text.find("KEY_SECRET"), 10, secret);
    return sluice::testing::parse_ok(text);
  }();
  return parsed;
}

BucketQuery query(std::string target) {
  auto parsed = sluice::parse_bucket_target(target);
  REQUIRE(std::holds_alternative<BucketQuery>(parsed));
  return std::get<BucketQuery>(parsed);
}

BucketTarget bucket(std::string target) {
  auto found = sluice::find_bucket(*config(), query(std::move(target)));
  if (auto* error = std::get_if<BucketRequestError>(&found)) FAIL(error->message);
  return std::get<BucketTarget>(found);
}

BucketRequestError refusal(std::string target) {
  auto parsed = sluice::parse_bucket_target(target);
  if (auto* error = std::get_if<BucketRequestError>(&parsed)) return *error;
  auto found = sluice::find_bucket(*config(), std::get<BucketQuery>(parsed));
  REQUIRE(std::holds_alternative<BucketRequestError>(found));
  return std::get<BucketRequestError>(found);
}

// The descriptor the request path builds for `request` on limit `name`.
sluice::LimitDescriptor request_descriptor(const std::string& name, const Request& request) {
  const auto& limits = config()->limits;
  const auto it = std::find_if(limits.begin(), limits.end(),
                               [&](const sluice::LimitConfig& l) { return l.name == name; });
  REQUIRE(it != limits.end());
  const sluice::RequestView view = request.view();
  auto keys = sluice::build_limit_descriptors({&*it}, view, config()->api_keys,
                                              sluice::identify(view, config()->api_keys),
                                              config()->redis.key_secret);
  REQUIRE_FALSE(keys.refusal);
  REQUIRE(keys.descriptors.size() == 1);
  return keys.descriptors.front();
}

void check_same(const sluice::LimitDescriptor& a, const sluice::LimitDescriptor& b) {
  CHECK(a.limit == b.limit);
  CHECK(a.key_hash == b.key_hash);
  CHECK(a.capacity == b.capacity);
  CHECK(a.refill_per_second == b.refill_per_second);
  CHECK(sluice::bucket_name(a) == sluice::bucket_name(b));
}

}  // namespace

TEST_CASE("bucket requests: the target's limit, values in order and plan", "[admin][keys]") {
  const auto q = query("/ratelimit/buckets/per_key_path?value=a%2Bb+c&value=%2Fapi%2F1&plan=pro");
  CHECK(q.limit == "per_key_path");
  CHECK(q.values == std::vector<std::string>{"a+b c", "/api/1"});
  CHECK(q.plan == std::optional<std::string>("pro"));
  CHECK(query("/ratelimit/buckets/everyone").values.empty());
  CHECK(refusal("/ratelimit/buckets/per_ip?value=1.2.3.4&bogus=1").status == 400);
  CHECK(refusal("/ratelimit/buckets/per_key?value=k&plan=pro&plan=free").status == 400);
  CHECK(refusal("/ratelimit/buckets/a/b?value=1").status == 404);
}

TEST_CASE("bucket requests: unknown limits, wrong counts, bad values and plans", "[admin][keys]") {
  CHECK(refusal("/ratelimit/buckets/nope?value=1").status == 404);
  const auto count = refusal("/ratelimit/buckets/per_key_path?value=demo-pro-key");
  CHECK(count.status == 400);
  CHECK(count.message ==
        "limit \"per_key_path\" is keyed by api_key, path: give 2 value parameter(s), got 1");
  CHECK(refusal("/ratelimit/buckets/everyone?value=x").status == 400);
  CHECK(refusal("/ratelimit/buckets/per_ip?value=not-an-ip").message ==
        "value 1 (ip) is not an IP address");
  CHECK(refusal("/ratelimit/buckets/per_ip?value=").message == "value 1 (ip) is empty");
  CHECK(refusal("/ratelimit/buckets/per_key?value=demo-pro-key&plan=platinum").status == 400);
  // An API key that names no consumer keys a request by its client IP: no such bucket.
  CHECK(refusal("/ratelimit/buckets/per_key?value=stranger").status == 400);
  // A value a Bearer credential cannot carry.
  CHECK(refusal("/ratelimit/buckets/per_key?value=two+words").status == 400);
}

TEST_CASE("bucket requests: the same bucket as a request with the same values", "[admin][keys]") {
  SECTION("api_key, with the consumer's plan or another one") {
    Request request;
    request.header("Authorization", "Bearer demo-pro-key");
    const auto want = request_descriptor("per_key", request);
    const auto got = bucket("/ratelimit/buckets/per_key?value=demo-pro-key");
    check_same(got.descriptor, want);
    CHECK(got.plan == "pro");
    CHECK(got.descriptor.capacity == 100);
    const auto free = bucket("/ratelimit/buckets/per_key?value=demo-pro-key&plan=free");
    CHECK(free.descriptor.key_hash == want.key_hash);
    CHECK(free.descriptor.capacity == 10);
    CHECK(free.plan == "free");
  }
  SECTION("ip, IPv4 and IPv6") {
    Request request;
    request.ip = sluice::testing::ipv4(203, 0, 113, 7);
    check_same(bucket("/ratelimit/buckets/per_ip?value=203.0.113.7").descriptor,
               request_descriptor("per_ip", request));
    request.ip = *sluice::parse_ip("2001:db8::1");
    check_same(bucket("/ratelimit/buckets/per_ip?value=2001%3Adb8%3A%3A1").descriptor,
               request_descriptor("per_ip", request));
    CHECK(bucket("/ratelimit/buckets/per_ip?value=203.0.113.7").descriptor.key_hash !=
          bucket("/ratelimit/buckets/per_ip?value=203.0.113.8").descriptor.key_hash);
    // IPv6 clients are grouped by their /64 as requests are: any address of
    // the network names its bucket.
    CHECK(bucket("/ratelimit/buckets/per_ip?value=2001:db8:0:1::5").descriptor.key_hash ==
          bucket("/ratelimit/buckets/per_ip?value=2001:db8:0:1:ffff::9").descriptor.key_hash);
    CHECK(bucket("/ratelimit/buckets/per_ip?value=2001:db8:0:1::5").descriptor.key_hash !=
          bucket("/ratelimit/buckets/per_ip?value=2001:db8:0:2::5").descriptor.key_hash);
  }
  SECTION("composite keys: api_key and path, header and query") {
    Request request;
    request.header("Authorization", "Bearer demo-pro-key");
    request.path = "/api/orders/7";
    check_same(
        bucket("/ratelimit/buckets/per_key_path?value=demo-pro-key&value=/api/orders/7").descriptor,
        request_descriptor("per_key_path", request));
    // A path as sent is keyed as the request path keys it: normalized,
    // without ";parameters" ("/api;v=2/%7eorders//7" is "/api/~orders/7").
    Request spelled;
    spelled.header("Authorization", "Bearer demo-pro-key");
    spelled.path = "/api/~orders/7";
    check_same(bucket("/ratelimit/buckets/per_key_path?value=demo-pro-key&value=/api%3Bv=2/"
                      "%257eorders//7")
                   .descriptor,
               request_descriptor("per_key_path", spelled));
    CHECK(refusal("/ratelimit/buckets/per_key_path?value=demo-pro-key&value=api")
              .message.find("is not a request path") != std::string::npos);
    Request user;
    user.header("X-User", "alice");
    user.query = "x=1&tenant=acme+corp";
    check_same(
        bucket("/ratelimit/buckets/per_tenant_user?value=alice&value=acme%20corp").descriptor,
        request_descriptor("per_tenant_user", user));
    // The order of the values follows the limit's key list.
    CHECK(bucket("/ratelimit/buckets/per_tenant_user?value=acme%20corp&value=alice")
              .descriptor.key_hash != request_descriptor("per_tenant_user", user).key_hash);
  }
  SECTION("global") {
    check_same(bucket("/ratelimit/buckets/everyone").descriptor,
               request_descriptor("everyone", Request{}));
  }
}

TEST_CASE("bucket requests: the document shows the hashed name, never the value", "[admin]") {
  const auto target = bucket("/ratelimit/buckets/per_key?value=demo-pro-key");
  sluice::BucketView view;
  view.exists = true;
  view.tokens = 42.5;
  view.seconds_to_full = 5.75;
  const auto doc = sluice::bucket_document(target, view);
  CHECK(doc.dump().find("demo-pro-key") == std::string::npos);
  CHECK(doc["limit"] == "per_key");
  CHECK(doc["bucket"] == sluice::bucket_name(target.descriptor));
  CHECK(doc["algorithm"] == "token_bucket");
  CHECK(doc["capacity"] == 100.0);
  CHECK(doc["refill_per_second"] == 10.0);
  CHECK(doc["exists"] == true);
  CHECK(doc["tokens"] == 42.5);
  CHECK(doc["full_in_ms"] == 5750);
  const auto empty = sluice::bucket_document(target, sluice::BucketView{});
  CHECK(empty["exists"] == false);
  CHECK(empty["tokens"] == 100.0);
  CHECK(empty["full_in_ms"] == 0);
}

TEST_CASE("bucket requests: a sliding window shows its window", "[admin]") {
  const auto target = bucket("/ratelimit/buckets/per_minute?value=demo-pro-key");
  CHECK(target.descriptor.algorithm == sluice::LimitAlgorithm::kSlidingWindow);
  const auto doc = sluice::bucket_document(target, sluice::BucketView{});
  CHECK(doc["algorithm"] == "sliding_window");
  CHECK(doc["window_ms"] == 60000);
  CHECK(doc["capacity"] == 60.0);
  CHECK_FALSE(doc.contains("refill_per_second"));
}
