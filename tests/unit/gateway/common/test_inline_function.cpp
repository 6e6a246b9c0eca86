// The move-only completion type of the request path.
#include <catch2/catch.hpp>

#include <array>
#include <functional>
#include <memory>
#include <string>

#include "common/inline_function.hpp"

namespace sluice {
namespace {

// Counts its live copies, so that a test can see none is lost or doubled.
struct Tracked {
  static inline int live = 0;
  std::shared_ptr<int> hits = std::make_shared<int>(0);
  Tracked() { ++live; }
  Tracked(Tracked&& o) noexcept : hits(std::move(o.hits)) { ++live; }
  Tracked(const Tracked&) = delete;
  ~Tracked() { --live; }
};

}  // namespace

TEST_CASE("inline function: small callables in place, large ones on the heap, both work",
          "[common][inline_function]") {
  using Small = InlineFunction<int(int), 32>;
  auto owner = std::make_shared<int>(5);
  auto in_place = [owner](int x) { return *owner + x; };  // not trivially copyable
  STATIC_REQUIRE(Small::kInPlace<decltype(in_place)>);
  std::array<char, 64> big{};
  big[63] = 7;
  auto on_heap = [big](int x) { return big[63] + x; };
  STATIC_REQUIRE_FALSE(Small::kInPlace<decltype(on_heap)>);
  Small f = in_place;
  Small g = on_heap;
  CHECK(f(1) == 6);
  CHECK(g(1) == 8);
  Small moved = std::move(f);
  CHECK_FALSE(f);  // NOLINT: moved from, empty as a moved std::function may be
  CHECK(moved(2) == 7);
  moved = std::move(g);
  CHECK(moved(3) == 10);
  CHECK(owner.use_count() == 2);  // in_place's own copy; moved's released
}

TEST_CASE("inline function: a move-only capture, called through const, destroyed once",
          "[common][inline_function]") {
  Tracked::live = 0;
  std::shared_ptr<int> hits;
  {
    Tracked t;
    hits = t.hits;
    InlineFunction<void(std::unique_ptr<int>&&), 48> f =
        [t = std::move(t)](std::unique_ptr<int>&& p) mutable { *t.hits += *p; };
    const auto& called = f;
    called(std::make_unique<int>(3));
    called(std::make_unique<int>(4));
    CHECK(*hits == 7);
    InlineFunction<void(std::unique_ptr<int>&&), 48> g;
    CHECK_FALSE(g);
    CHECK(g == nullptr);
    g = std::move(f);
    g(std::make_unique<int>(1));
    CHECK(*hits == 8);
    CHECK(Tracked::live == 2);  // `t` moved from, and the one inside g
    g = nullptr;
    CHECK(Tracked::live == 1);
  }
  CHECK(Tracked::live == 0);
}

TEST_CASE("inline function: an empty one throws as std::function does, and empties convert empty",
          "[common][inline_function]") {
  InlineFunction<void(), 16> empty;
  CHECK_THROWS_AS(empty(), std::bad_function_call);
  InlineFunction<void(), 16> also = nullptr;
  CHECK_FALSE(also);
  CHECK_FALSE(InlineFunction<void(), 16>(std::function<void()>{}));
  void (*no_function)() = nullptr;
  CHECK_FALSE(InlineFunction<void(), 16>(no_function));
  CHECK_FALSE(InlineFunction<void(), 16>(InlineFunction<void(), 32>{}));
  CHECK(InlineFunction<void(), 16>(std::function<void()>([] {})));
}

TEST_CASE("inline function: assigned one that lives inside the callable it replaces",
          "[common][inline_function]") {
  using F = InlineFunction<int(), 64>;
  auto seven = std::make_shared<int>(7);
  F f;
  // While it runs, the callable puts the function it holds in its own place:
  // that function is taken before the old callable (which holds it) goes.
  f = [&f, next = F([seven] { return *seven; })]() mutable {
    f = std::move(next);
    return 0;
  };
  CHECK(f() == 0);
  CHECK(f() == 7);
  CHECK(seven.use_count() == 2);
}

}  // namespace sluice
