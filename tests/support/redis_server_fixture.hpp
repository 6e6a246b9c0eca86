// Test helper: a real redis-server child process on a free 127.0.0.1 port,
// with no persistence, in its own temporary directory. Killed by PID (never by
// name) in the destructor. Supports restart on the same port, extra
// arguments (TLS, ACL, requirepass), and SIGSTOP / SIGCONT.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace sluice::test {

// A directory under $TMPDIR (or /tmp), removed with its contents at the end.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/sluice-redis-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A port that was free a moment ago (bind to port 0, read it, close).
inline std::uint16_t pick_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("bind/getsockname failed");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// A blocking TCP connection to 127.0.0.1:port with send/receive timeouts, or -1.
inline int connect_loopback(std::uint16_t port, std::chrono::milliseconds timeout) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Renders a hiredis reply the way redis-cli does, roughly: "OK", "PONG",
// "value", "(nil)", "(integer) 3", "ERR ...", arrays as "[a, b]".
inline std::string render_reply(const redisReply& r) {
  switch (r.type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      return std::string(r.str, r.len);
    case REDIS_REPLY_INTEGER:
      return "(integer) " + std::to_string(r.integer);
    case REDIS_REPLY_ARRAY: {
      std::string out = "[";
      for (std::size_t i = 0; i < r.elements; ++i) {
        if (i != 0) out += ", ";
        out += render_reply(*r.element[i]);
      }
      return out + "]";
    }
    default:
      return "(nil)";
  }
}

// Sends commands over one blocking connection and returns the rendered
// replies. Throws on connection failure or timeout (test code only).
inline std::vector<std::string> sync_commands(
    std::uint16_t port, const std::vector<std::vector<std::string>>& cmds,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(2000)) {
  const int fd = connect_loopback(port, timeout);
  if (fd < 0) throw std::runtime_error("cannot connect to redis on port " + std::to_string(port));
  std::string out;
  for (const auto& args : cmds) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.c_str());
      lens.push_back(a.size());
    }
    char* cmd = nullptr;
    const int len =
        redisFormatCommandArgv(&cmd, static_cast<int>(argv.size()), argv.data(), lens.data());
    out.append(cmd, static_cast<std::size_t>(len));
    redisFreeCommand(cmd);
  }
  std::size_t sent = 0;
  while (sent < out.size()) {
    const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      ::close(fd);
      throw std::runtime_error("send to redis failed");
    }
    sent += static_cast<std::size_t>(n);
  }
  redisReader* reader = redisReaderCreate();
  std::vector<std::string> replies;
  char buf[4096];
  while (replies.size() < cmds.size()) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader, &raw) != REDIS_OK) break;
    if (raw != nullptr) {
      replies.push_back(render_reply(*static_cast<redisReply*>(raw)));
      freeReplyObject(raw);
      continue;
    }
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    redisReaderFeed(reader, buf, static_cast<std::size_t>(n));
  }
  redisReaderFree(reader);
  ::close(fd);
  if (replies.size() < cmds.size()) throw std::runtime_error("no reply from redis");
  return replies;
}

// SIGKILLs the process `pid` (when > 0), reaps it, and sets `pid` to -1.
// Safe on a stopped process, idempotent.
inline void kill_and_reap(pid_t& pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  pid = -1;
}

// Starts `args` (args[0] a full path) with stdin from /dev/null and stdout
// and stderr appended to `output`; returns its PID. Throws if it cannot start.
inline pid_t spawn_process(std::vector<std::string> args, const std::string& output) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("posix_spawn " + args[0] + " failed");
  return pid;
}

struct RedisServerOptions {
  bool tls = false;                     // port() is then a TLS-only port (--port 0 --tls-port P)
  std::vector<std::string> extra_args;  // e.g. TLS files, --requirepass
  // A cluster node: its bus gets a free port of its own (by default it is
  // port + 10000, which may be past 65535 or another process's port).
  bool cluster_bus = false;
};

class RedisServerFixture {
 public:
  explicit RedisServerFixture(RedisServerOptions options = {}) : options_(std::move(options)) {
    // A port picked free can be taken before redis binds it: try a few.
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = pick_free_port();
      if (options_.cluster_bus) {
        do {
          bus_port_ = pick_free_port();
        } while (bus_port_ == port_);
      }
      if (try_start()) return;
    }
    throw std::runtime_error("redis-server did not start: " + log_tail());
  }

  ~RedisServerFixture() { stop(); }
  RedisServerFixture(const RedisServerFixture&) = delete;
  RedisServerFixture& operator=(const RedisServerFixture&) = delete;

  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  const TempDir& dir() const { return dir_; }

  // SIGKILL by PID and reap. Safe on a stopped process, idempotent.
  void stop() { kill_and_reap(pid_); }

  // Starts again on the same port (redis binds with SO_REUSEADDR).
  void start() {
    if (pid_ > 0) return;
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (try_start()) return;
    }
    throw std::runtime_error("redis-server did not restart: " + log_tail());
  }

  void restart() {
    stop();
    start();
  }

  // SIGSTOP / SIGCONT; each returns once the kernel reports the new state.
  void pause() {
    ::kill(pid_, SIGSTOP);
    int status = 0;
    ::waitpid(pid_, &status, WUNTRACED);
  }
  void resume() {
    ::kill(pid_, SIGCONT);
    int status = 0;
    ::waitpid(pid_, &status, WCONTINUED);
  }

  // One command over plain TCP (not for TLS servers).
  std::string command(const std::vector<std::string>& args) {
    return sync_commands(port_, {args}).front();
  }
  std::vector<std::string> commands(const std::vector<std::vector<std::string>>& cmds) {
    return sync_commands(port_, cmds);
  }

 private:
  bool try_start() {
    const std::string port = std::to_string(port_);
    std::vector<std::string> args = {"/usr/bin/redis-server",
                                     "--bind",
                                     "127.0.0.1",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--daemonize",
                                     "no",
                                     "--protected-mode",
                                     "no",
                                     "--dir",
                                     dir_.path(),
                                     "--logfile",
                                     dir_.file("redis.log")};
    if (options_.tls) {
      args.insert(args.end(), {"--port", "0", "--tls-port", port});
    } else {
      args.insert(args.end(), {"--port", port});
    }
    args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
    if (options_.cluster_bus) args.insert(args.end(), {"--cluster-port", std::to_string(bus_port_)});
    pid_ = spawn_process(std::move(args), dir_.file("stdout.log"));
    return wait_ready();
  }

  // Polls until the server answers (PING, or a TCP accept for TLS), or exits.
  bool wait_ready() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // exited, e.g. port taken
        pid_ = -1;
        return false;
      }
      if (probe()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    stop();
    return false;
  }

  bool probe() const {
    if (options_.tls) {
      const int fd = connect_loopback(port_, std::chrono::milliseconds(200));
      if (fd < 0) return false;
      ::close(fd);
      return true;
    }
    try {
      // Any reply but LOADING means the server serves (NOAUTH counts: requirepass).
      return sync_commands(port_, {{"PING"}}, std::chrono::milliseconds(200))
                 .front()
                 .rfind("LOADING", 0) != 0;
    } catch (const std::exception&) {
      return false;
    }
  }

  std::string log_tail() const {
    std::ifstream in(dir_.file("redis.log"));
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    return s.size() > 2000 ? s.substr(s.size() - 2000) : s;
  }

  RedisServerOptions options_;
  TempDir dir_;
  std::uint16_t port_ = 0;
  std::uint16_t bus_port_ = 0;  // cluster_bus only
  pid_t pid_ = -1;
};

}  // namespace sluice::test
