#include "upstream/health/health_probe.hpp"

#include <algorithm>

namespace sluice {

std::string health_check_request(const HealthCheckConfig& check, const HostPort& server) {
  std::string out;
  out.reserve(96 + check.path.size() + server.host.size());
  out.append("GET ").append(check.path).append(" HTTP/1.1\r\n");
  out.append("Host: ").append(server.to_string()).append("\r\n");
  out.append("User-Agent: sluice-health-check\r\nConnection: close\r\n\r\n");
  return out;
}

std::optional<unsigned> parse_status_line(std::string_view line) {
  // "HTTP/1.x SSS", then nothing or a space and the reason phrase.
  constexpr std::string_view kVersion = "HTTP/1.";
  if (line.size() < 12 || !line.starts_with(kVersion)) return std::nullopt;
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (!digit(line[7]) || line[8] != ' ') return std::nullopt;
  if (!digit(line[9]) || !digit(line[10]) || !digit(line[11])) return std::nullopt;
  if (line.size() > 12 && line[12] != ' ') return std::nullopt;
  const unsigned status = (line[9] - '0') * 100u + (line[10] - '0') * 10u + (line[11] - '0');
  if (status < 100 || status > 599) return std::nullopt;
  return status;
}

bool is_expected_status(const HealthCheckConfig& check, unsigned status) {
  return std::find(check.expected_status.begin(), check.expected_status.end(), status) !=
         check.expected_status.end();
}

}  // namespace sluice
