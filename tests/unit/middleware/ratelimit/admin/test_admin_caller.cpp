// How the log names whoever changed something through the admin API.
#include <catch2/catch.hpp>

#include <string>

#include "middleware/ratelimit/admin/admin_caller.hpp"

namespace {

namespace http = boost::beast::http;
using sluice::AdminRequest;
using sluice::admin_caller;

std::string caller_with(std::string_view authorization, std::string_view peer = "10.0.0.7") {
  AdminRequest request{http::verb::put, "/consumers/acme", 11};
  if (!authorization.empty()) request.set(http::field::authorization, authorization);
  return admin_caller({request, peer});
}

}  // namespace

TEST_CASE("admin caller: the peer and a short fingerprint of the token, never the token") {
  const std::string caller = caller_with("Bearer s3cret-admin-token");
  CHECK(caller.rfind("peer 10.0.0.7, token ", 0) == 0);
  const std::string fingerprint = caller.substr(caller.rfind(' ') + 1);
  CHECK(fingerprint.size() == 12);
  CHECK(fingerprint.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(caller.find("s3cret") == std::string::npos);
  // printf %s s3cret-admin-token | sha256sum | cut -c1-12
  CHECK(fingerprint == "757224ba3770");
  // The same token gives the same fingerprint, whatever the scheme's spacing;
  // another token another one.
  CHECK(caller_with("Bearer   s3cret-admin-token ") == caller);
  CHECK(caller_with("Bearer other-token") != caller);
}

TEST_CASE("admin caller: no token, and no known peer") {
  CHECK(caller_with("") == "peer 10.0.0.7, no token");
  CHECK(caller_with("", "") == "peer unknown, no token");
}
