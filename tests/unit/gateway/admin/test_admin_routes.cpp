// AdminRoutes: dispatch by method and path, the 404/405 rules and the JSON bodies.
#include <catch2/catch.hpp>

#include <optional>

#include "gateway/admin/admin_routes.hpp"

namespace http = boost::beast::http;
using sluice::AdminReply;
using sluice::AdminRequest;
using sluice::AdminResponse;
using sluice::AdminRoutes;

namespace {

AdminResponse dispatch(const AdminRoutes& routes, http::verb method, std::string target) {
  AdminRequest req{method, target, 11};
  req.set(http::field::host, "127.0.0.1:9901");
  std::optional<AdminResponse> got;
  routes.dispatch({req, "127.0.0.1"}, [&got](AdminResponse res) { got = std::move(res); });
  REQUIRE(got);
  return *got;
}

AdminRoutes example_routes() {
  AdminRoutes routes;
  routes.add("/healthz", [](const sluice::AdminCall&, AdminReply reply) {
    reply(sluice::json_response(http::status::ok, {{"status", "ok"}}));
  });
  routes.add("/buckets",
             [](const sluice::AdminCall& call, AdminReply reply) {
               reply(sluice::json_response(
                   http::status::ok, {{"method", std::string{http::to_string(call.request.method())}},
                                      {"peer", std::string(call.peer)}}));
             },
             {http::verb::get, http::verb::delete_});
  return routes;
}

}  // namespace

TEST_CASE("admin routes: a known path and method reach the handler, the query ignored") {
  const auto res = dispatch(example_routes(), http::verb::get, "/healthz?verbose=1");
  CHECK(res.result() == http::status::ok);
  CHECK(res.body() == "{\"status\":\"ok\"}\n");
  CHECK(res[http::field::content_type] == "application/json");
  CHECK(res[http::field::cache_control] == "no-store");
  CHECK(res[http::field::server] == "sluice");
  CHECK(dispatch(example_routes(), http::verb::delete_, "/buckets").body() ==
        "{\"method\":\"DELETE\",\"peer\":\"127.0.0.1\"}\n");
}

TEST_CASE("admin routes: an unknown path is 404 for GET and HEAD") {
  for (const auto method : {http::verb::get, http::verb::head}) {
    const auto res = dispatch(example_routes(), method, "/nowhere");
    CHECK(res.result() == http::status::not_found);
    CHECK(res.body() == "{\"error\":\"not found\"}\n");
  }
}

TEST_CASE("admin routes: a method an endpoint does not take is 405 with its Allow") {
  auto res = dispatch(example_routes(), http::verb::post, "/healthz");
  CHECK(res.result() == http::status::method_not_allowed);
  CHECK(res.body() == "{\"error\":\"method not allowed\"}\n");
  CHECK(res[http::field::allow] == "GET, HEAD");
  CHECK(dispatch(example_routes(), http::verb::put, "/buckets")[http::field::allow] ==
        "GET, DELETE");
  res = dispatch(example_routes(), http::verb::post, "/nowhere");
  CHECK(res.result() == http::status::method_not_allowed);
  CHECK(res[http::field::allow] == "GET, HEAD");
}

TEST_CASE("admin routes: a prefix endpoint takes longer paths; exact and longer prefixes win") {
  AdminRoutes routes;
  const auto answer = [](std::string who) {
    return [who](const sluice::AdminCall&, AdminReply reply) {
      reply(sluice::json_response(http::status::ok, {{"who", who}}));
    };
  };
  routes.add("/ratelimit/", answer("short"), {http::verb::get}, sluice::AdminMatch::kPrefix);
  routes.add("/ratelimit/buckets/", answer("long"), {http::verb::get}, sluice::AdminMatch::kPrefix);
  routes.add("/ratelimit/buckets/exact", answer("exact"), {http::verb::get});
  CHECK(dispatch(routes, http::verb::get, "/ratelimit/buckets/per_ip?value=1").body() ==
        "{\"who\":\"long\"}\n");
  CHECK(dispatch(routes, http::verb::get, "/ratelimit/buckets/exact").body() ==
        "{\"who\":\"exact\"}\n");
  CHECK(dispatch(routes, http::verb::get, "/ratelimit/other").body() == "{\"who\":\"short\"}\n");
  // The prefix itself names no resource.
  CHECK(dispatch(routes, http::verb::get, "/ratelimit/").result() == http::status::not_found);
  CHECK(dispatch(routes, http::verb::get, "/ratelimi").result() == http::status::not_found);
}

TEST_CASE("admin routes: a protected endpoint follows the access in force, the others do not") {
  AdminRoutes routes = example_routes();
  routes.add(
      "/secret",
      [](const sluice::AdminCall&, AdminReply reply) {
        reply(sluice::json_response(http::status::ok, {{"ok", true}}));
      },
      {http::verb::get, http::verb::delete_}, sluice::AdminMatch::kExact,
      sluice::AdminGuard::kProtected);
  // Default: no token, loopback listener.
  CHECK(dispatch(routes, http::verb::get, "/secret").result() == http::status::ok);
  routes.set_access({"", false, {}});
  CHECK(dispatch(routes, http::verb::delete_, "/secret").result() == http::status::forbidden);
  CHECK(dispatch(routes, http::verb::get, "/healthz").result() == http::status::ok);
  routes.set_access({"s3cret", false, {}});
  const auto res = dispatch(routes, http::verb::get, "/secret");
  CHECK(res.result() == http::status::unauthorized);
  CHECK(res[http::field::www_authenticate] == "Bearer");
  AdminRequest req{http::verb::get, "/secret", 11};
  req.set(http::field::host, "127.0.0.1:9901");
  req.set(http::field::authorization, "Bearer s3cret");
  std::optional<AdminResponse> got;
  routes.dispatch({req, "127.0.0.1"}, [&got](AdminResponse r) { got = std::move(r); });
  REQUIRE(got);
  CHECK(got->result() == http::status::ok);
  // A browser's request from another site is refused before the token is looked at.
  req.set(http::field::origin, "http://evil.example");
  CHECK(routes.refuse({req, "127.0.0.1"})->result() == http::status::forbidden);
  req.erase(http::field::origin);
  CHECK_FALSE(routes.refuse({req, "127.0.0.1"}));
}

TEST_CASE("admin routes: a body of another type than the endpoint's is refused from the head") {
  AdminRoutes routes;
  routes.add(
      "/things/", [](const sluice::AdminCall&, AdminReply) { FAIL("not reached"); },
      {http::verb::get, http::verb::put}, sluice::AdminMatch::kPrefix,
      sluice::AdminGuard::kProtected, "application/json");
  AdminRequest req{http::verb::put, "/things/a", 11};
  req.set(http::field::host, "localhost:9901");
  req.set(http::field::content_type, "text/plain");
  CHECK(routes.refuse({req, "127.0.0.1"})->result() == http::status::unsupported_media_type);
  req.set(http::field::content_type, "application/json; charset=utf-8");
  CHECK_FALSE(routes.refuse({req, "127.0.0.1"}));
  // Unknown paths and methods are refused from the head too.
  AdminRequest other{http::verb::post, "/nowhere", 11};
  CHECK(routes.refuse({other, "127.0.0.1"})->result() == http::status::method_not_allowed);
}
