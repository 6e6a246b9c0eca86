// Request ids: a client's kept when sane, Sluice's own 32 random hex digits.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "upstream/proxy_headers.hpp"

using namespace sluice;

TEST_CASE("request ids: kept when sane, generated otherwise", "[proxy_headers]") {
  CHECK(is_acceptable_request_id("abc-123"));
  CHECK_FALSE(is_acceptable_request_id(""));
  CHECK_FALSE(is_acceptable_request_id("has space"));
  CHECK_FALSE(is_acceptable_request_id(std::string(129, 'a')));
  CHECK_FALSE(is_acceptable_request_id("bad\x7f"));
  auto a = generate_request_id();
  auto b = generate_request_id();
  CHECK(a.size() == 32);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(a != b);
  // Every digit turns up at every position (512 ids: a position missing one
  // by chance is less likely than 1 in 10^11).
  std::vector<std::string> seen(32);
  for (int n = 0; n < 512; ++n) {
    const std::string id = generate_request_id();
    for (std::size_t i = 0; i < id.size(); ++i) {
      if (seen[i].find(id[i]) == std::string::npos) seen[i] += id[i];
    }
  }
  for (const auto& digits : seen) CHECK(digits.size() == 16);
}
