// Test helper: a ClusterClient on a test loop with seed nodes on 127.0.0.1,
// a few tiny scripts, and blocking-style calls that run the loop until the
// completion arrives (bounded). Generous deadlines: the machine is shared.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "support/cluster_fixture.hpp"
#include "support/io_loop.hpp"
#include "upstream/redis/cluster/cluster_client.hpp"

namespace sluice::test {

struct ClusterDriver {
  using Result = std::pair<std::error_code, redis::Reply>;

  static redis::Options options_for(std::uint16_t seed, const std::vector<std::uint16_t>& more) {
    redis::Options options;
    options.topology = redis::Topology::kCluster;
    options.host = "127.0.0.1";
    options.port = seed;
    for (const auto port : more) options.nodes.push_back({"127.0.0.1", port});
    options.command_timeout = std::chrono::milliseconds(1000);
    options.connect_timeout = std::chrono::milliseconds(1000);
    options.backoff_initial = std::chrono::milliseconds(50);
    options.backoff_max = std::chrono::milliseconds(200);
    return options;
  }

  ClusterDriver(Loop& external, std::uint16_t seed, std::vector<std::uint16_t> more = {})
      : loop(external),
        client(std::make_unique<redis::ClusterClient>(loop.io.get_executor(),
                                                      options_for(seed, more))) {}
  explicit ClusterDriver(std::uint16_t seed, std::vector<std::uint16_t> more = {})
      : owned(std::in_place),
        loop(*owned),
        client(std::make_unique<redis::ClusterClient>(loop.io.get_executor(),
                                                      options_for(seed, more))) {}

  ~ClusterDriver() {
    client->close();
    client.reset();
    loop.io.poll();  // let the closed handlers run before the loop goes
  }

  // True once the client is ready (every slot has a ready owner).
  bool connect(std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
    std::optional<std::error_code> outcome;
    client->connect([&](std::error_code ec) { outcome = ec; });
    loop.run_until([&] { return outcome.has_value(); }, limit);
    return loop.run_until([&] { return client->is_ready(); }, limit);
  }

  Result call(const redis::Script& script, std::vector<std::string> keys,
              std::vector<std::string> args) {
    std::optional<Result> result;
    client->evalsha(
        script, std::move(keys), std::move(args),
        [&](std::error_code ec, redis::Reply reply) { result.emplace(ec, std::move(reply)); });
    loop.run_until([&] { return result.has_value(); }, std::chrono::milliseconds(10000));
    return result.value_or(Result{redis::Error::kTimeout, {}});
  }

  Result command(std::vector<std::string> args) {
    std::optional<Result> result;
    client->command(std::move(args), [&](std::error_code ec, redis::Reply reply) {
      result.emplace(ec, std::move(reply));
    });
    loop.run_until([&] { return result.has_value(); }, std::chrono::milliseconds(10000));
    return result.value_or(Result{redis::Error::kTimeout, {}});
  }

  const redis::Script set_script{"return redis.call('SET', KEYS[1], ARGV[1])"};
  const redis::Script set_two_script{
      "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('SET', KEYS[2], ARGV[1])"};
  const redis::Script get_script{"return redis.call('GET', KEYS[1])"};

  std::optional<Loop> owned;
  Loop& loop;
  std::unique_ptr<redis::ClusterClient> client;
};

}  // namespace sluice::test
