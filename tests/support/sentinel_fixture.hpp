// Test helper: a real Sentinel setup on 127.0.0.1 free ports: one primary,
// one replica of it (--replicaof) and three redis-sentinel processes
// monitoring it as "mymaster" with quorum 2, down-after-milliseconds 1000 and
// a short failover timeout. Each process has a temporary directory of its
// own and is stopped by PID (SIGKILL), never by name. By default the
// constructor returns once every sentinel knows the replica and the two other
// sentinels, so that a failover can be asked for or provoked.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/redis_server_fixture.hpp"

namespace sluice::test {

inline constexpr const char* kSentinelMaster = "mymaster";

// One redis-sentinel process with its own config file (sentinels rewrite it).
class SentinelProcess {
 public:
  explicit SentinelProcess(std::uint16_t primary_port) : primary_port_(primary_port) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = pick_free_port();
      if (launch()) return;
    }
    throw std::runtime_error("redis-sentinel did not start");
  }
  ~SentinelProcess() { stop(); }
  SentinelProcess(const SentinelProcess&) = delete;
  SentinelProcess& operator=(const SentinelProcess&) = delete;

  std::uint16_t port() const { return port_; }

  void stop() { kill_and_reap(pid_); }

  std::vector<std::string> commands(const std::vector<std::vector<std::string>>& cmds) {
    return sync_commands(port_, cmds);
  }

 private:
  bool launch() {
    const std::string conf = dir_.file("sentinel.conf");
    std::ofstream(conf) << "port " << port_ << "\nbind 127.0.0.1\ndaemonize no\n"
                        << "protected-mode no\ndir " << dir_.path() << "\nlogfile "
                        << dir_.file("sentinel.log") << "\nsentinel monitor " << kSentinelMaster
                        << " 127.0.0.1 " << primary_port_ << " 2\n"
                        << "sentinel down-after-milliseconds " << kSentinelMaster << " 1000\n"
                        << "sentinel failover-timeout " << kSentinelMaster << " 4000\n"
                        << "sentinel parallel-syncs " << kSentinelMaster << " 1\n";
    std::string binary = "/usr/bin/redis-sentinel";
    std::string conf_arg = conf;
    char* argv[] = {binary.data(), conf_arg.data(), nullptr};
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    const int rc = ::posix_spawn(&pid_, argv[0], &files, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&files);
    if (rc != 0) throw std::runtime_error("posix_spawn redis-sentinel failed");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // exited, e.g. port taken
        pid_ = -1;
        return false;
      }
      try {
        if (sync_commands(port_, {{"PING"}}, std::chrono::milliseconds(200)).front() == "PONG") {
          return true;
        }
      } catch (const std::exception&) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    stop();
    return false;
  }

  std::uint16_t primary_port_;
  TempDir dir_;
  std::uint16_t port_ = 0;
  pid_t pid_ = -1;
};

class SentinelFixture {
 public:
  // kReadyForFailover waits (a few seconds) until every sentinel knows the
  // replica and the others; kMonitoring only until they answer.
  enum class Wait { kReadyForFailover, kMonitoring };

  explicit SentinelFixture(Wait wait = Wait::kReadyForFailover)
      // No delay before the replica's first sync (diskless sync waits 5 s by default).
      : primary_(RedisServerOptions{false, {"--repl-diskless-sync-delay", "0"}}),
        replica_(RedisServerOptions{
            false, {"--replicaof", "127.0.0.1", std::to_string(primary_.port())}}) {
    // The replica must be attached before the sentinels look (they learn
    // replicas from the primary's INFO).
    if (!poll([&] { return role_of(replica_.port()) == "slave:connected"; })) {
      throw std::runtime_error("the replica did not attach to the primary");
    }
    for (int i = 0; i < 3; ++i)
      sentinels_.push_back(std::make_unique<SentinelProcess>(primary_.port()));
    const auto knows_all = [&] {
      for (const auto& s : sentinels_) {
        const auto r = s->commands({{"SENTINEL", "REPLICAS", kSentinelMaster},
                                    {"SENTINEL", "SENTINELS", kSentinelMaster}});
        if (r[0] == "[]" || r[1].find(", [") == std::string::npos) return false;
      }
      return true;
    };
    if (wait == Wait::kReadyForFailover && !poll(knows_all, std::chrono::seconds(20))) {
      throw std::runtime_error("the sentinels did not discover the replica and each other");
    }
  }

  RedisServerFixture& primary() { return primary_; }
  RedisServerFixture& replica() { return replica_; }
  SentinelProcess& sentinel(std::size_t i) { return *sentinels_.at(i); }
  std::size_t sentinel_count() const { return sentinels_.size(); }

  // The port the first live sentinel names as the primary's, or 0.
  std::uint16_t announced_primary_port() {
    for (const auto& s : sentinels_) {
      try {
        const auto r = s->commands({{"SENTINEL", "GET-MASTER-ADDR-BY-NAME", kSentinelMaster}});
        const auto comma = r[0].find(", ");
        if (comma == std::string::npos) return 0;
        return static_cast<std::uint16_t>(std::stoi(r[0].substr(comma + 2)));
      } catch (const std::exception&) {
      }
    }
    return 0;
  }

  // "master", "slave:connected", "slave:connecting"...: the ROLE of a data node.
  static std::string role_of(std::uint16_t port) {
    try {
      const auto r = sync_commands(port, {{"ROLE"}}, std::chrono::milliseconds(500)).front();
      if (r.starts_with("[master")) return "master";
      if (r.starts_with("[slave") || r.starts_with("[replica")) {
        return r.find(", connected,") != std::string::npos ? "slave:connected" : "slave:connecting";
      }
      return r;
    } catch (const std::exception&) {
      return "down";
    }
  }

  // Polls pred() every 20 ms until it holds or `limit` passes.
  template <class Pred>
  static bool poll(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

 private:
  RedisServerFixture primary_;
  RedisServerFixture replica_;
  std::vector<std::unique_ptr<SentinelProcess>> sentinels_;
};

}  // namespace sluice::test
