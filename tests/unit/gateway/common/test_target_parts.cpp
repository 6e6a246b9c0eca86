// Cutting a request-target into path and query.
#include <catch2/catch.hpp>

#include "common/target_parts.hpp"

namespace sluice {
namespace {

TEST_CASE("split_target: path before the first '?', query after it", "[common]") {
  const auto plain = split_target("/a/b");
  CHECK(plain.path == "/a/b");
  CHECK(plain.query.empty());

  const auto query = split_target("/a?x=1?y=2");
  CHECK(query.path == "/a");
  CHECK(query.query == "x=1?y=2");

  const auto empty = split_target("/a?");
  CHECK(empty.path == "/a");
  CHECK(empty.query.empty());
  const std::string_view target = "/a?";
  CHECK(target.substr(split_target(target).path.size()) == "?");

  CHECK(split_target("?q").path.empty());
  CHECK(split_target("").path.empty());
}

}  // namespace
}  // namespace sluice
