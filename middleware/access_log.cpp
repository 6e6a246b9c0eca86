#include "middleware/access_log.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>

#include <nlohmann/json.hpp>

#include "gateway/common/target_parts.hpp"

namespace sluice {

void AccessLog::on_exchange(const Config& config, const ExchangeSummary& s) {
  if (!config.log.access_log) return;
  const auto now = std::chrono::system_clock::now();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[64];
  std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  nlohmann::json line = {
      {"ts", ts},
      {"request_id", s.request_id},
      {"client_ip", s.client_ip.to_string()},
      {"method", s.method},
      {"path", split_target(s.target).path},
      {"route", s.route},
      {"status", s.status},
      {"duration_ms", s.duration_seconds * 1000.0},
      {"upstream", s.upstream_server},
      {"local", s.local},
  };
  auto text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  text += '\n';
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

}  // namespace sluice
