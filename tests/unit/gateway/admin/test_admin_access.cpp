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
  CHECK_FALSE(sluice::refuse_admin_request(request_with(std::nullopt), AdminAccess{"", true, {}}));
  const auto refusal = sluice::refuse_admin_request(request_with(std::nullopt), {"", false, {}});
  REQUIRE(refusal);
  CHECK(refusal->result() == http::status::forbidden);
  // A token sent to an instance that has none does not open it.
  CHECK(sluice::refuse_admin_request(request_with("Bearer x"), {"", false, {}}));
}

TEST_CASE("admin access: with a token, only requests carrying it, on any listener", "[admin]") {
  for (const bool loopback : {true, false}) {
    const AdminAccess access{"s3cret-token", loopback, {}};
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

namespace {

AdminRequest browser_request(http::verb method, std::initializer_list<
                                                    std::pair<std::string_view, std::string_view>>
                                                    headers) {
  AdminRequest req{method, "/consumers/import", 11};
  for (const auto& [name, value] : headers) req.set(name, value);
  return req;
}

std::optional<unsigned> refusal_status(const AdminRequest& req, std::string_view body_type = {}) {
  const std::vector<std::string> names = {"gw-1.internal"};
  auto refusal = sluice::refuse_browser_request(req, "10.0.0.5", names, body_type);
  if (!refusal) return std::nullopt;
  CHECK((*refusal)[http::field::content_type] == "application/problem+json");
  return refusal->result_int();
}

}  // namespace

TEST_CASE("admin access: the host of a Host value", "[admin]") {
  using sluice::host_without_port;
  CHECK(host_without_port("127.0.0.1:9901") == std::optional<std::string_view>("127.0.0.1"));
  CHECK(host_without_port("[::1]:9901") == std::optional<std::string_view>("::1"));
  CHECK(host_without_port("[::1]") == std::optional<std::string_view>("::1"));
  CHECK(host_without_port("localhost") == std::optional<std::string_view>("localhost"));
  for (const std::string_view bad : {"", ":9901", "[::1", "[::1]x", "a:b", "::1", "a:123456",
                                     "[]:1"}) {
    CHECK_FALSE(host_without_port(bad));
  }
}

TEST_CASE("admin access: the Hosts the admin answers to", "[admin]") {
  const std::vector<std::string> names = {"gw-1.internal"};
  for (const std::string_view ok : {"127.0.0.1", "127.0.0.1:9901", "127.200.0.1:1", "[::1]:9901",
                                    "[::1]", "localhost", "LocalHost:9901", "localhost.",
                                    "gw-1.internal", "GW-1.INTERNAL:9901", "10.0.0.5:9901",
                                    "[::ffff:127.0.0.1]:9901"}) {
    CHECK(sluice::admin_host_allowed(ok, "10.0.0.5", names));
  }
  for (const std::string_view bad : {"", "evil.example", "evil.example:9901", "gw-2.internal",
                                     "10.0.0.6:9901", "127.0.0.1.evil.example", "[::2]:9901",
                                     "localhost.evil", "0.0.0.0:9901"}) {
    CHECK_FALSE(sluice::admin_host_allowed(bad, "10.0.0.5", names));
  }
}

TEST_CASE("admin access: a browser's cross-site request is refused", "[admin]") {
  const auto post = http::verb::post;
  constexpr std::string_view kType = "application/x-ndjson";
  // What curl sends with the right type: let through.
  CHECK_FALSE(refusal_status(
      browser_request(post, {{"Host", "127.0.0.1:9901"}, {"Content-Type", kType}}), kType));
  CHECK_FALSE(refusal_status(browser_request(post, {{"Host", "127.0.0.1:9901"},
                                                    {"Content-Type", "Application/X-NDJSON; a=b"}}),
                             kType));
  // No Content-Type at all: taken as the endpoint's own (a browser's carries Origin).
  CHECK_FALSE(refusal_status(browser_request(post, {{"Host", "127.0.0.1"}}), kType));
  // A simple request's types, or an empty one: 415.
  for (const std::string_view type : {"text/plain", "application/x-www-form-urlencoded",
                                      "multipart/form-data; boundary=x", ""}) {
    CHECK(refusal_status(browser_request(post, {{"Host", "127.0.0.1"}, {"Content-Type", type}}),
                         kType) == 415u);
  }
  // A GET or DELETE takes no body: its Content-Type is not looked at.
  CHECK_FALSE(refusal_status(browser_request(http::verb::delete_, {{"Host", "127.0.0.1"}}), kType));
  // Another site: 403, whatever the type.
  for (const auto& headers :
       {std::pair<std::string_view, std::string_view>{"Origin", "http://evil.example"},
        {"Origin", "null"},
        {"Origin", "http://127.0.0.1:8080"},
        {"Origin", "https://127.0.0.1:9901"},
        {"Sec-Fetch-Site", "cross-site"},
        {"Sec-Fetch-Site", "same-site"}}) {
    CHECK(refusal_status(browser_request(post, {{"Host", "127.0.0.1:9901"},
                                                {"Content-Type", kType},
                                                headers}),
                         kType) == 403u);
  }
  // The admin's own origin, a same-origin or user-typed fetch: let through.
  CHECK_FALSE(refusal_status(browser_request(post, {{"Host", "127.0.0.1:9901"},
                                                    {"Origin", "http://127.0.0.1:9901"},
                                                    {"Sec-Fetch-Site", "same-origin"},
                                                    {"Content-Type", kType}}),
                             kType));
  CHECK_FALSE(refusal_status(
      browser_request(http::verb::get, {{"Host", "localhost"}, {"Sec-Fetch-Site", "none"}})));
  // DNS rebinding: a name the admin does not answer to; no Host at all.
  CHECK(refusal_status(browser_request(http::verb::get, {{"Host", "rebind.evil.example"}})) ==
        403u);
  CHECK(refusal_status(browser_request(http::verb::get, {})) == 403u);
}
