// The redis section's topology keys (standalone, sentinel, cluster), the key
// secret file, and what each refuses.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "gateway/config/load.hpp"
#include "support/config_text.hpp"
#include "support/redis_server_fixture.hpp"

namespace sluice {
namespace {

using testing::kMinimalTail;
using testing::parse;
using testing::parse_ok;

std::vector<std::string> errors_of(const std::string& redis_section) {
  return parse("redis:\n" + redis_section + kMinimalTail).errors;
}

}  // namespace

TEST_CASE("redis topology: standalone by default, no nodes", "[config][redis]") {
  const auto c = parse_ok(std::string("redis:\n  url: redis://10.0.0.1:6379/2\n") + kMinimalTail);
  CHECK(c->redis.topology == RedisConfig::Topology::kStandalone);
  CHECK(c->redis.nodes.empty());
  CHECK(c->redis.key_secret.empty());
}

TEST_CASE("redis topology: sentinel with its master, nodes and credentials", "[config][redis]") {
  const auto c = parse_ok(std::string(R"(redis:
  url: "redis://app:pw@10.0.0.1:26379/3"
  topology: sentinel
  nodes: ["10.0.0.2:26379", "[::1]:26380"]
  sentinel_master: mymaster
  sentinel_username: watcher
  sentinel_password: s3cret
)") + kMinimalTail);
  const RedisConfig& r = c->redis;
  CHECK(r.topology == RedisConfig::Topology::kSentinel);
  REQUIRE(r.nodes.size() == 2);
  CHECK(r.nodes[0].to_string() == "10.0.0.2:26379");
  CHECK(r.nodes[1].to_string() == "[::1]:26380");
  CHECK(r.sentinel_master == "mymaster");
  CHECK(r.sentinel_username == "watcher");
  CHECK(r.sentinel_password == "s3cret");
  CHECK(r.db == 3);
  CHECK(r.user == "app");
}

TEST_CASE("redis topology: cluster with seeds", "[config][redis]") {
  const auto c = parse_ok(std::string(R"(redis:
  url: "redis://10.0.0.1:7000"
  topology: cluster
  nodes: ["10.0.0.2:7000", "10.0.0.3:7000"]
)") + kMinimalTail);
  CHECK(c->redis.topology == RedisConfig::Topology::kCluster);
  CHECK(c->redis.nodes.size() == 2);
  CHECK(to_string(c->redis.topology) == "cluster");
}

TEST_CASE("redis topology: what each topology refuses", "[config][redis]") {
  CHECK(errors_of("  topology: clustre\n") ==
        std::vector<std::string>{
            "test.yaml:2: redis.topology: expected standalone, sentinel or cluster, got \"clustre\""});
  CHECK(errors_of("  topology: sentinel\n") ==
        std::vector<std::string>{
            "test.yaml:2: redis.topology: sentinel requires redis.sentinel_master"});
  CHECK(errors_of("  nodes: [\"10.0.0.2:6379\"]\n  sentinel_master: m\n  sentinel_password: pw\n") ==
        std::vector<std::string>{
            "test.yaml:2: redis.nodes: only valid with topology sentinel or cluster",
            "test.yaml:3: redis.sentinel_master: only valid with topology sentinel",
            "test.yaml:4: redis.sentinel_password: only valid with topology sentinel"});
  CHECK(errors_of("  url: redis://10.0.0.1:7000/1\n  topology: cluster\n  key_prefix: \"{rl}:\"\n") ==
        std::vector<std::string>{
            "test.yaml:2: redis.url: a Redis Cluster has only db 0",
            "test.yaml:4: redis.key_prefix: must not contain '{' with topology cluster: the "
            "bucket's hash tag picks its slot"});
  CHECK(errors_of("  topology: cluster\n  nodes: [\"10.0.0.2\"]\n").size() == 1);
  CHECK(errors_of("  topology: sentinel\n  sentinel_master: m\n  sentinel_username: u\n") ==
        std::vector<std::string>{
            "test.yaml:4: redis.sentinel_username: requires redis.sentinel_password"});
}

TEST_CASE("redis key secret: read from its file, trailing newline dropped; short or missing refused",
          "[config][redis]") {
  test::TempDir dir;
  const std::string good = dir.file("secret");
  std::ofstream(good) << "0123456789abcdef-more-bytes\n";
  const auto c = parse_ok("redis:\n  key_secret_file: " + good + "\n" + kMinimalTail);
  CHECK(c->redis.key_secret == "0123456789abcdef-more-bytes");
  CHECK(c->redis.key_secret_file == good);

  const std::string short_file = dir.file("short");
  std::ofstream(short_file) << "tiny\n";
  CHECK(errors_of("  key_secret_file: " + short_file + "\n") ==
        std::vector<std::string>{"test.yaml:2: redis.key_secret_file: \"" + short_file +
                                 "\" holds 4 bytes; a key secret needs at least 16"});
  const std::string missing = dir.file("absent");
  CHECK(errors_of("  key_secret_file: " + missing + "\n") ==
        std::vector<std::string>{"test.yaml:2: redis.key_secret_file: cannot read \"" + missing +
                                 "\": No such file or directory"});
  // No error message ever shows the secret itself.
  for (const auto& e : errors_of("  key_secret_file: " + good + "\n  bogus: 1\n")) {
    CHECK(e.find("0123456789abcdef") == std::string::npos);
  }
}
}  // namespace sluice
