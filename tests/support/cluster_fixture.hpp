// Test helper: a real Redis Cluster of 3 primaries and 3 replicas, six
// cluster-enabled redis-server processes on free 127.0.0.1 ports (each in its
// own temporary directory, with a 1000 ms cluster-node-timeout (3000 ms under
// the sanitizers, where a node starved of CPU was marked failed), no
// persistence, and cluster-require-full-coverage off so that the slots of a
// dead primary fail alone), joined with `redis-cli --cluster create
// --cluster-replicas 1` and ready once every node reports cluster_state:ok
// and every replica has synced with its primary. Processes are stopped by
// PID. shared() starts one cluster per test process, lazily; a test that
// changes it restores it.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/redis_server_fixture.hpp"

namespace sluice::test {

class ClusterFixture {
 public:
  static constexpr int kNodes = 6;

  // One node as another node sees it (a line of CLUSTER NODES).
  struct NodeView {
    std::string id;
    std::uint16_t port = 0;
    bool primary = false;
    bool failed = false;                     // flags fail or pfail
    std::string primary_id;                  // replicas: their primary's id
    std::vector<std::pair<int, int>> slots;  // slot ranges (primaries)
  };

  ClusterFixture() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    const char* const node_timeout_ms = "3000";
#else
    const char* const node_timeout_ms = "1000";
#endif
    RedisServerOptions options;
    options.extra_args = {
        "--cluster-enabled",      "yes",  "--cluster-config-file",           "nodes.conf",
        "--cluster-node-timeout", node_timeout_ms, "--cluster-require-full-coverage", "no"};
    options.cluster_bus = true;
    for (int i = 0; i < kNodes; ++i)
      nodes_.push_back(std::make_unique<RedisServerFixture>(options));
    std::vector<std::string> args = {"/usr/bin/redis-cli", "--cluster", "create"};
    for (const auto& node : nodes_) args.push_back("127.0.0.1:" + std::to_string(node->port()));
    args.insert(args.end(), {"--cluster-replicas", "1", "--cluster-yes"});
    run(args, std::chrono::seconds(60));
    if (!wait_ok(std::chrono::seconds(30))) throw std::runtime_error("cluster did not become ok");
  }

  static ClusterFixture& shared() {
    static ClusterFixture cluster;
    return cluster;
  }

  std::vector<std::uint16_t> ports() const {
    std::vector<std::uint16_t> out;
    for (const auto& node : nodes_) out.push_back(node->port());
    return out;
  }
  RedisServerFixture& node(std::uint16_t port) {
    for (auto& node : nodes_) {
      if (node->port() == port) return *node;
    }
    throw std::runtime_error("no node on port " + std::to_string(port));
  }
  bool running(std::uint16_t port) { return node(port).pid() > 0; }

  // One command to the node on `port`, rendered as sync_commands does.
  std::string command(std::uint16_t port, const std::vector<std::string>& args) {
    return sync_commands(port, {args}).front();
  }

  // The cluster as the node on `port` sees it.
  std::vector<NodeView> view(std::uint16_t port) {
    std::vector<NodeView> out;
    std::istringstream lines(command(port, {"CLUSTER", "NODES"}));
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      NodeView node;
      std::string address, flags, ignored;
      fields >> node.id >> address >> flags >> node.primary_id;
      if (node.id.empty()) continue;
      for (int i = 0; i < 4; ++i) fields >> ignored;  // ping, pong, epoch, link
      const auto colon = address.find(':');
      node.port = static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1)));
      node.primary = flags.find("master") != std::string::npos;
      node.failed = flags.find("fail") != std::string::npos;
      std::string range;
      while (fields >> range) {
        if (range.front() == '[') continue;  // a migrating / importing marker
        const auto dash = range.find('-');
        const int first = std::stoi(range.substr(0, dash));
        node.slots.emplace_back(
            first, dash == std::string::npos ? first : std::stoi(range.substr(dash + 1)));
      }
      out.push_back(std::move(node));
    }
    return out;
  }

  // The port of the primary owning `slot`, as a running node sees it (0: none).
  std::uint16_t owner(int slot) {
    for (const NodeView& node : view(any_running())) {
      if (!node.primary || node.failed) continue;
      for (const auto& [first, last] : node.slots) {
        if (slot >= first && slot <= last) return node.port;
      }
    }
    return 0;
  }
  std::string id_of(std::uint16_t port) {
    for (const NodeView& node : view(any_running())) {
      if (node.port == port) return node.id;
    }
    return {};
  }
  // The replica of the primary on `port`.
  std::uint16_t replica_of(std::uint16_t port) {
    const std::string id = id_of(port);
    for (const NodeView& node : view(any_running())) {
      if (!node.primary && node.primary_id == id) return node.port;
    }
    return 0;
  }

  // Polls until every running node reports cluster_state:ok, sees no
  // failed primary, and every replica's link to its primary is up.
  bool wait_ok(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (all_ok()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  std::uint16_t any_running() {
    for (const auto& node : nodes_) {
      if (node->pid() > 0) return node->port();
    }
    throw std::runtime_error("no node running");
  }

  bool all_ok() {
    try {
      for (const auto& node : nodes_) {
        if (node->pid() <= 0) continue;
        if (command(node->port(), {"CLUSTER", "INFO"}).find("cluster_state:ok") ==
            std::string::npos) {
          return false;
        }
        // A replica that never synced cannot take over from its primary.
        const std::string replication = command(node->port(), {"INFO", "replication"});
        if (replication.find("role:slave") != std::string::npos &&
            replication.find("master_link_status:up") == std::string::npos) {
          return false;
        }
        for (const NodeView& v : view(node->port())) {
          if (v.primary && !v.slots.empty() && v.failed) return false;
        }
      }
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }

  // Runs a command to its end (bounded; killed by PID past the limit).
  static void run(std::vector<std::string> args, std::chrono::seconds limit) {
    const std::string name = args.front();
    const pid_t pid = spawn_process(std::move(args), "/dev/null");
    const auto deadline = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        throw std::runtime_error(name + " did not finish");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      throw std::runtime_error(name + " failed");
    }
  }

  std::vector<std::unique_ptr<RedisServerFixture>> nodes_;
};

}  // namespace sluice::test
