#include <catch2/catch.hpp>
#include <string>

#include "common/recycler.hpp"

namespace sluice {

TEST_CASE("recycler: an object given back is taken again, up to the bound", "[common][recycler]") {
  Recycler<std::string> strings(2);
  auto a = strings.take();
  a->assign(100, 'x');
  const std::string* where = a.get();
  strings.give_back(std::move(a));
  CHECK(strings.kept() == 1);
  auto again = strings.take();
  CHECK(again.get() == where);      // the same object,
  CHECK(again->capacity() >= 100);  // with what it held (the caller empties it)
  CHECK(strings.kept() == 0);
  strings.give_back(std::move(again));
  strings.give_back(std::make_unique<std::string>("b"));
  strings.give_back(std::make_unique<std::string>("c"));  // over the bound: freed
  strings.give_back(nullptr);
  CHECK(strings.kept() == 2);
  CHECK(strings.take() != nullptr);
  CHECK(strings.take() != nullptr);
  CHECK(strings.take() != nullptr);  // none kept: a new one
}

}  // namespace sluice
