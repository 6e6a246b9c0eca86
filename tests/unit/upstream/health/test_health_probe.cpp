// What an active health check sends and how its status line is judged.
#include <catch2/catch.hpp>

#include "upstream/health/health_probe.hpp"

namespace sluice {

TEST_CASE("the health check request", "[health_probe]") {
  HealthCheckConfig check;
  check.path = "/healthz?deep=1";
  CHECK(health_check_request(check, HostPort{"127.0.0.1", 9001}) ==
        "GET /healthz?deep=1 HTTP/1.1\r\n"
        "Host: 127.0.0.1:9001\r\n"
        "User-Agent: sluice-health-check\r\n"
        "Connection: close\r\n"
        "\r\n");
  CHECK(health_check_request(check, HostPort{"::1", 80}).find("Host: [::1]:80\r\n") !=
        std::string::npos);
}

TEST_CASE("status lines", "[health_probe]") {
  CHECK(parse_status_line("HTTP/1.1 200 OK") == 200u);
  CHECK(parse_status_line("HTTP/1.0 503 Service Unavailable") == 503u);
  CHECK(parse_status_line("HTTP/1.1 204") == 204u);
  CHECK(parse_status_line("HTTP/1.1 200 ") == 200u);
  CHECK_FALSE(parse_status_line(""));
  CHECK_FALSE(parse_status_line("HTTP/1.1 20"));
  CHECK_FALSE(parse_status_line("HTTP/1.1 2000 OK"));
  CHECK_FALSE(parse_status_line("HTTP/2 200 OK"));
  CHECK_FALSE(parse_status_line("HTTP/1.1  200 OK"));
  CHECK_FALSE(parse_status_line("http/1.1 200 OK"));
  CHECK_FALSE(parse_status_line("HTTP/1.1 099 Nope"));
  CHECK_FALSE(parse_status_line("HTTP/1.1 600 Nope"));
  CHECK_FALSE(parse_status_line("SSH-2.0-OpenSSH_9.2"));
}

TEST_CASE("expected statuses", "[health_probe]") {
  HealthCheckConfig check;
  CHECK(is_expected_status(check, 200));  // the default
  CHECK_FALSE(is_expected_status(check, 204));
  check.expected_status = {200, 204};
  CHECK(is_expected_status(check, 204));
  CHECK_FALSE(is_expected_status(check, 500));
}

}  // namespace sluice
