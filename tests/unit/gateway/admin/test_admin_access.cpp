// The access rule of protected admin endpoints: the bearer token when one is
// configured, else a loopback listener only.
#include <catch2/catch.hpp>

#include "gateway/admin/admin_access.hpp"

namespace http = boost::beast::http;
using sluice::AdminAccess;
using sluice::AdminRequest;

namespace {

AdminRequest request_with(std::optional<std::string> authorization) {
  AdminRequest req{http::verb::delete_, "/ratelimit/buckets/per_ip?value=1.2.3.4", 11};
  if (authorization) req.set(http::field::authorization, *authorization);
  return req;
}

}  // namespace

TEST_CASE("admin access: the bearer token of an Authorization value", "[admin]") {
  CHECK(sluice::bearer_token("Bearer abc") == std::optional<std::string_view>("abc"));
  CHECK(sluice::bearer_token("  bearer   abc  ") == std::optional<std::string_view>("abc"));
  CHECK_FALSE(sluice::bearer_token("Basic abc"));
  CHECK_FALSE(sluice::bearer_token("Bearer"));
  CHECK_FALSE(sluice::bearer_token("Bearer   "));
  CHECK_FALSE(sluice::bearer_token("Bearerabc"));
}

TEST_CASE("admin access: equality that does not stop at the first difference", "[admin]") {
  CHECK(sluice::constant_time_equal("s3cret", "s3cret"));
  CHECK_FALSE(sluice::constant_time_equal("s3cret", "s3creT"));
  CHECK_FALSE(sluice::constant_time_equal("s3cret", "s3cret2"));
  CHECK_FALSE(sluice::constant_time_equal("", "x"));
  CHECK(sluice::constant_time_equal("", ""));
}

TEST_CASE("admin access: without a token, loopback listeners only", "[admin]") {
  CHECK_FALSE(sluice::refuse_admin_request(request_with(std::nullopt), AdminAccess{"", true}));
  const auto refusal = sluice::refuse_admin_request(request_with(std::nullopt), {"", false});
  REQUIRE(refusal);
  CHECK(refusal->result() == http::status::forbidden);
  // A token sent to an instance that has none does not open it.
  CHECK(sluice::refuse_admin_request(request_with("Bearer x"), {"", false}));
}

TEST_CASE("admin access: with a token, only requests carrying it, on any listener", "[admin]") {
  for (const bool loopback : {true, false}) {
    const AdminAccess access{"s3cret-token", loopback};
    CHECK_FALSE(sluice::refuse_admin_request(request_with("Bearer s3cret-token"), access));
    for (const auto& bad : {std::optional<std::string>{}, std::optional<std::string>{"Bearer x"},
                            std::optional<std::string>{"Bearer s3cret-token2"},
                            std::optional<std::string>{"Basic s3cret-token"}}) {
      const auto refusal = sluice::refuse_admin_request(request_with(bad), access);
      REQUIRE(refusal);
      CHECK(refusal->result() == http::status::unauthorized);
      CHECK((*refusal)[http::field::www_authenticate] == "Bearer");
      // The token is never echoed.
      CHECK(refusal->body().find("s3cret") == std::string::npos);
    }
  }
}
