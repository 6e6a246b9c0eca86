#include "middleware/access_log.hpp"

#include <chrono>
#include <cstdio>

#include "middleware/access_log_line.hpp"

namespace sluice {

void AccessLog::on_exchange(const Config& config, const ExchangeSummary& summary) {
  if (!config.log.access_log) return;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  const std::string line = access_log_line(summary, ms);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

}  // namespace sluice
