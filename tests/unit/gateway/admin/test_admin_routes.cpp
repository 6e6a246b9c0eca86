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
  std::optional<AdminResponse> got;
  routes.dispatch(req, [&got](AdminResponse res) { got = std::move(res); });
  REQUIRE(got);
  return *got;
}

AdminRoutes example_routes() {
  AdminRoutes routes;
  routes.add("/healthz", [](const AdminRequest&, AdminReply reply) {
    reply(sluice::json_response(http::status::ok, {{"status", "ok"}}));
  });
  routes.add("/buckets",
             [](const AdminRequest& req, AdminReply reply) {
               reply(sluice::json_response(
                   http::status::ok, {{"method", std::string{http::to_string(req.method())}}}));
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
        "{\"method\":\"DELETE\"}\n");
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
