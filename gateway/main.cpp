// sluice: the executable and the composition root. It parses the command
// line, loads the configuration and wires the gateway to the middleware it
// knows nothing of; it is the only gateway file that includes middleware/.
#include <netdb.h>
#include <sys/socket.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "gateway/application.hpp"
#include "gateway/config/load.hpp"
#include "gateway/endpoints.hpp"
#include "gateway/version.hpp"
#include "middleware/ratelimit/admin/bucket_endpoint.hpp"
#include "services/rls/rls_service.hpp"
#include "telemetry/tracing_services.hpp"
#include "middleware/ratelimit/audit/top_endpoint.hpp"
#include "middleware/ratelimit/consumers/consumer_endpoint.hpp"
#include "middleware/ratelimit/consumers/consumer_import.hpp"
#include "middleware/setup.hpp"

namespace {

constexpr const char* kUsage =
    "usage: sluice --config FILE [--log-level trace|debug|info|warn|error]\n"
    "       sluice --config FILE --check [--print-endpoints]\n"
    "       sluice --version\n";

constexpr const char* kHelp =
    "\n"
    "Sluice: an HTTP/1.1 API gateway with distributed rate limiting. It routes each\n"
    "request by the YAML file's routes, decides its limits in Redis (429 with\n"
    "Retry-After and RateLimit headers when a limit is spent) and streams it to\n"
    "an upstream.\n"
    "\n"
    "  --config FILE       the configuration (every key: docs/configuration.md)\n"
    "  --check             validate FILE, print \"configuration OK\" or every error\n"
    "                      and warning, and exit 0 or 1; opens no socket\n"
    "  --print-endpoints   with --check: the listeners, Redis and upstreams as JSON\n"
    "  --log-level LEVEL   override log.level (reloads keep it)\n"
    "  --version           print the version and exit\n"
    "  -h, --help          this text\n"
    "\n"
    "Signals: SIGHUP reloads FILE (an invalid file is logged and the running\n"
    "configuration kept); SIGTERM or SIGINT stops accepting, lets in-flight\n"
    "requests finish within server.drain_timeout_ms, and exits 0.\n"
    "Under systemd (Type=notify) it reports READY, RELOADING and STOPPING.\n"
    "Admin endpoints (admin.listen): /healthz, /readyz, /metrics.\n";

bool valid_level(const std::string& level) {
  return level == "trace" || level == "debug" || level == "info" || level == "warn" ||
         level == "error";
}

// Upstream servers given by name are resolved for every new connection. A
// name that does not resolve at start is worth a warning (a typo, or a
// container not up yet) but not a refusal: it may resolve later. --check does
// not do this, as it opens no socket.
void warn_unresolved_upstreams(const sluice::Config& config) {
  for (const auto& upstream : config.upstreams) {
    for (std::size_t i = 0; i < upstream.servers.size(); ++i) {
      const auto& server = upstream.servers[i];
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      hints.ai_flags = AI_NUMERICSERV;
      addrinfo* found = nullptr;
      const int rc =
          getaddrinfo(server.host.c_str(), std::to_string(server.port).c_str(), &hints, &found);
      if (found) freeaddrinfo(found);
      if (rc != 0) {
        spdlog::warn(
            "upstreams.{}.servers[{}]: host \"{}\" does not resolve now ({}); it is resolved "
            "again for every new connection",
            upstream.name, i, server.host, gai_strerror(rc));
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // A closed stdout or stderr (a log reader that went away) must not end the
  // process mid-drain: writes to it fail instead.
  std::signal(SIGPIPE, SIG_IGN);
  std::optional<std::string> config_path;
  std::optional<std::string> log_level;
  bool check = false;
  bool print_endpoints = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--version") {
      const auto v = sluice::version();
      std::printf("sluice %.*s\n", static_cast<int>(v.size()), v.data());
      return 0;
    } else if (arg == "--check") {
      check = true;
    } else if (arg == "--print-endpoints") {
      print_endpoints = true;
    } else if (arg == "--config" && i + 1 < argc) {
      config_path = argv[++i];
    } else if (arg.rfind("--config=", 0) == 0) {
      config_path = arg.substr(9);
    } else if (arg == "--log-level" && i + 1 < argc) {
      log_level = argv[++i];
    } else if (arg.rfind("--log-level=", 0) == 0) {
      log_level = arg.substr(12);
    } else if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::fputs(kHelp, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "sluice: unknown argument '%s'\n%s", arg.c_str(), kUsage);
      return 2;
    }
  }
  if (!config_path) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (print_endpoints && !check) {
    std::fprintf(stderr, "sluice: --print-endpoints needs --check\n%s", kUsage);
    return 2;
  }
  if (log_level && !valid_level(*log_level)) {
    std::fprintf(stderr, "sluice: bad --log-level '%s'\n", log_level->c_str());
    return 2;
  }

  auto result = sluice::load_config_file(*config_path);
  if (!result.config) {
    for (const auto& e : result.errors) std::fprintf(stderr, "%s\n", e.c_str());
    std::fprintf(stderr, "configuration invalid: %zu error(s)\n", result.errors.size());
    return 1;
  }
  for (const auto& w : result.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (check) {
    if (print_endpoints) {
      // stdout holds only the JSON document, for scripts to parse.
      std::fprintf(stderr, "configuration OK\n");
      std::printf("%s\n", sluice::endpoints_json(*result.config).c_str());
    } else {
      std::printf("configuration OK\n");
    }
    return 0;
  }

  // Logs go to stderr; stdout is kept for the access log.
  auto logger = spdlog::stderr_color_mt("sluice");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ %v");
  spdlog::set_level(spdlog::level::from_str(log_level.value_or(result.config->log.level)));

  warn_unresolved_upstreams(*result.config);

  sluice::ApplicationOptions options;
  auto buckets = std::make_shared<sluice::BucketWorkers>();
  auto consumers = std::make_shared<sluice::ConsumerWorkers>();
  auto top = std::make_shared<sluice::TopWorkers>();
  options.services =
      sluice::with_tracing(sluice::make_middleware_services({buckets, consumers, top}));
  options.log_level_from_command_line = log_level.has_value();
  options.listeners.push_back(sluice::rls_listener(buckets));
  sluice::Application app(*config_path, result.config, std::move(options));
  sluice::add_bucket_endpoints(app.admin_routes(), buckets);
  sluice::add_consumer_endpoints(app.admin_routes(), consumers);
  sluice::add_consumer_import(app.admin_routes(), consumers);
  sluice::add_top_endpoint(app.admin_routes(), top);
  if (!app.start()) return 1;
  return app.run();
}
