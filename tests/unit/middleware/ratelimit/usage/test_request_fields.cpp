// Members of a JSON request body read before its decision
// (middleware/ratelimit/usage/request_fields.hpp), a model's entry among a
// limit's models, and the estimate a route takes from the body.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "gateway/config/config.hpp"
#include "middleware/ratelimit/request_cost.hpp"
#include "middleware/ratelimit/usage/request_fields.hpp"

namespace sluice::usage {
namespace {

BodyFields fields_of(std::string_view body, std::vector<std::string> paths) {
  BodyFields out;
  read_body_fields(body, paths, out);
  return out;
}

std::optional<std::string> value_of(const BodyFields& fields, std::string_view path) {
  const BodyField* f = body_field(fields, path);
  if (!f) return std::nullopt;
  return f->value;
}

}  // namespace

TEST_CASE("request body members: strings and numbers at root paths", "[usage][body]") {
  const auto f = fields_of(
      R"({"messages":[{"role":"user","model":"inner"}],"model":"gpt-4o","max_tokens":300,)"
      R"("metadata":{"user":"u-7","n":1.5e2},"stream":true})",
      {"model", "max_tokens", "metadata.user", "metadata.n", "stream", "messages"});
  CHECK(value_of(f, "model") == "gpt-4o");  // never the one inside the array
  CHECK(body_number(f, "max_tokens") == 300);
  CHECK(value_of(f, "metadata.user") == "u-7");
  CHECK(body_number(f, "metadata.n") == 150);
  CHECK_FALSE(value_of(f, "stream"));    // a boolean is not taken
  CHECK_FALSE(value_of(f, "messages"));  // nor an array
}

TEST_CASE("request body members: the last of a duplicate, bad numbers", "[usage][body]") {
  auto f = fields_of(R"({"model":"a","model":"b","max_tokens":"12"})", {"model", "max_tokens"});
  CHECK(value_of(f, "model") == "b");
  CHECK_FALSE(body_number(f, "max_tokens"));  // a string is not a number
  for (const std::string& bad : std::vector<std::string>{"-1", "1e309", std::string(400, '9'), "null", "{}"}) {
    INFO(bad);
    f = fields_of(R"({"max_tokens":)" + bad + "}", {"max_tokens"});
    CHECK_FALSE(body_number(f, "max_tokens"));
  }
  f = fields_of(R"({"max_tokens":1000000000000})", {"max_tokens"});
  CHECK(body_number(f, "max_tokens") == 1e12);
}

TEST_CASE("request body members: not JSON, cut short, nested too deep", "[usage][body]") {
  CHECK(fields_of("model=gpt-4o", {"model"}).empty());
  CHECK(fields_of("", {"model"}).empty());
  CHECK(fields_of(R"(["model","x"])", {"model"}).empty());
  // Cut in the middle: what came before the cut is kept.
  CHECK(value_of(fields_of(R"({"model":"gpt-4o","messages":[{"content":"hel)", {"model"}),
                 "model") == "gpt-4o");
  CHECK(fields_of(R"({"model":"gpt-4)", {"model"}).empty());
  // 100,000 deep: the parse stops at the bound, the stack does not grow.
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += R"({"a":)";
  CHECK(fields_of(R"({"model":"m","x":)" + deep, {"model"}).size() == 1);
  CHECK(fields_of(deep + R"({"model":"m"})", {"model"}).empty());
  // A very long string value is not a key.
  CHECK(fields_of(R"({"model":")" + std::string(5000, 'x') + "\"}", {"model"}).empty());
}

TEST_CASE("a limit's models: an exact name, else the longest prefix", "[usage][body]") {
  LimitConfig limit;
  limit.models.push_back({"*", {1, 1, 0}, {}});
  limit.models.push_back({"small-*", {2, 1, 0}, {}});
  limit.models.push_back({"small-v2-*", {3, 1, 0}, {}});
  limit.models.push_back({"gpt-4o", {4, 1, 0}, {}});
  CHECK(limit.for_model("gpt-4o")->bucket.capacity == 4);
  CHECK(limit.for_model("gpt-4o-mini")->bucket.capacity == 1);
  CHECK(limit.for_model("small-v2-1")->bucket.capacity == 3);
  CHECK(limit.for_model("small-1")->bucket.capacity == 2);
  limit.models.erase(limit.models.begin());
  CHECK(limit.for_model("other") == nullptr);
}

TEST_CASE("a route's estimate from the body", "[usage][body]") {
  RouteConfig route;
  route.cost = 500;
  route.body.cost = RequestBodyCost{{"max_completion_tokens", "max_tokens"}, true, 4};
  LimitDescriptor limit;
  limit.capacity = 100000;
  limit.algorithm = LimitAlgorithm::kTokenBucket;
  const std::vector<LimitDescriptor> limits{limit};
  BodyFields fields{{"max_tokens", "300", true}};
  RequestView view;
  view.body_fields = &fields;
  view.body_length = 401;
  CHECK(body_estimate(route, view, limits) == 300 + 101);
  fields.insert(fields.begin(), {"max_completion_tokens", "70.2", true});
  CHECK(body_estimate(route, view, limits) == 71 + 101);
  fields = {{"max_tokens", "0", true}};  // under 1: the default
  CHECK(body_estimate(route, view, limits) == 500 + 101);
  fields = {{"max_tokens", "1e12", true}};  // clamped to the smallest capacity
  CHECK(body_estimate(route, view, limits) == 100000);
  view.body_fields = nullptr;
  view.body_length.reset();
  CHECK(body_estimate(route, view, limits) == 500);
}

}  // namespace sluice::usage
