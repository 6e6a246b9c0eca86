// Which certificate a client's SNI picks.
#include <catch2/catch.hpp>

#include "gateway/tls/server_tls.hpp"

using sluice::pick_certificate;

TEST_CASE("SNI: an exact name first, then a one-label wildcard, else the default", "[tls]") {
  const std::vector<std::vector<std::string>> names = {
      {"default.test"}, {"*.wild.test", "api.test"}, {"exact.wild.test"}};
  CHECK(pick_certificate(names, "default.test") == 0);
  CHECK(pick_certificate(names, "api.test") == 1);
  CHECK(pick_certificate(names, "API.TEST") == 1);
  // An exact name wins over an earlier wildcard.
  CHECK(pick_certificate(names, "exact.wild.test") == 2);
  CHECK(pick_certificate(names, "x.wild.test") == 1);
  // A wildcard covers one label only, and never the bare parent.
  CHECK(pick_certificate(names, "a.b.wild.test") == 0);
  CHECK(pick_certificate(names, "wild.test") == 0);
  CHECK(pick_certificate(names, ".wild.test") == 0);
  CHECK(pick_certificate(names, "unknown.test") == 0);
  CHECK(pick_certificate(names, "") == 0);
}
