// The address a $NOTIFY_SOCKET value names.
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>

#include "gateway/service_notify.hpp"

using sluice::notify_address;

TEST_CASE("notify socket: a path, an abstract name, or nothing", "[service]") {
  auto path = notify_address("/run/systemd/notify");
  REQUIRE(path);
  CHECK(std::string(path->address.sun_path) == "/run/systemd/notify");
  CHECK(path->length == offsetof(sockaddr_un, sun_path) + 20);  // with its terminator

  auto abstract = notify_address("@sluice/notify");
  REQUIRE(abstract);
  CHECK(abstract->address.sun_path[0] == '\0');
  CHECK(std::string(abstract->address.sun_path + 1, 13) == "sluice/notify");
  CHECK(abstract->length == offsetof(sockaddr_un, sun_path) + 14);  // no terminator

  CHECK_FALSE(notify_address(""));
  CHECK_FALSE(notify_address("/"));
  CHECK_FALSE(notify_address("relative/notify"));
  CHECK_FALSE(notify_address(std::string(200, '/')));  // longer than sun_path
}
