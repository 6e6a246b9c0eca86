// What one active health check sends and how its answer is judged, as pure
// functions: the request bytes, the status line's code, and whether that code
// counts as healthy. The checker (health_checker.hpp) does the I/O.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "upstream/upstream_config.hpp"

namespace sluice {

// "GET <path> HTTP/1.1" with Host (the server's host:port), User-Agent
// sluice-health-check and Connection: close.
std::string health_check_request(const HealthCheckConfig& check, const HostPort& server);

// The status code of an HTTP/1.x status line ("HTTP/1.1 200 OK", without the
// line break), or none when the line is not one.
std::optional<unsigned> parse_status_line(std::string_view line);

// The code is one of the check's expected statuses.
bool is_expected_status(const HealthCheckConfig& check, unsigned status);

}  // namespace sluice
