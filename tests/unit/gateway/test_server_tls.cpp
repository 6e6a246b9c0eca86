// Which certificate a client's SNI picks; the SNI name read from a
// ClientHello's extension; cipher lists OpenSSL takes or refuses.
#include <catch2/catch.hpp>

#include "gateway/config/config.hpp"
#include "gateway/tls/server_tls.hpp"

using sluice::cipher_list_error;
using sluice::pick_certificate;
using sluice::server_name_of_extension;

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

TEST_CASE("SNI: the host name of a server_name extension", "[tls]") {
  auto name_of = [](std::vector<unsigned char> bytes) {
    return std::string(server_name_of_extension(bytes.data(), bytes.size()));
  };
  // list length 8, type 0, name length 5, "a.bcd"
  CHECK(name_of({0, 8, 0, 0, 5, 'a', '.', 'b', 'c', 'd'}) == "a.bcd");
  // An entry of another type first is skipped.
  CHECK(name_of({0, 10, 7, 0, 1, 'x', 0, 0, 3, 'a', 'p', 'i'}) == "api");
  // Malformed: a list length that disagrees, a name running past the end, too short.
  CHECK(name_of({0, 9, 0, 0, 5, 'a', '.', 'b', 'c', 'd'}).empty());
  CHECK(name_of({0, 4, 0, 0, 9, 'a'}).empty());
  CHECK(name_of({0}).empty());
  CHECK(name_of({}).empty());
  CHECK(name_of({0, 4, 1, 0, 1, 'x'}).empty());  // no host name entry
}

TEST_CASE("cipher lists: OpenSSL must select at least one cipher", "[tls]") {
  CHECK(cipher_list_error(std::string(sluice::kDefaultTlsCiphers), false).empty());
  CHECK(cipher_list_error(std::string(sluice::kDefaultTlsCiphersuites), true).empty());
  CHECK(cipher_list_error("ECDHE-RSA-AES128-GCM-SHA256:NO-SUCH", false).empty());
  CHECK(cipher_list_error("NO-SUCH", false) == "OpenSSL knows no cipher in \"NO-SUCH\"");
  CHECK_FALSE(cipher_list_error("TLS_NOT_A_SUITE", true).empty());
}
