// guarded() and run_guarded(): an exception on the data path ends the one
// owner it concerns, is reported once, and the io_context keeps running.
#include <catch2/catch.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "common/guarded.hpp"

namespace guarded_test {

struct Owner {
  std::vector<std::string> errors;
  int calls = 0;
  void on_internal_error(std::string_view what) { errors.emplace_back(what); }
};

struct Escape {
  std::vector<std::string> what;
  std::vector<bool> reported;
  void operator()(std::string_view w, bool r) {
    what.emplace_back(w);
    reported.push_back(r);
  }
};

void run(boost::asio::io_context& io, Escape& escape) {
  sluice::run_guarded(io, [&](std::string_view w, bool r) { escape(w, r); });
}


TEST_CASE("guarded: a handler that runs normally reports nothing") {
  boost::asio::io_context io;
  auto owner = std::make_shared<Owner>();
  boost::asio::post(io, sluice::guarded(owner, [](Owner& o) { ++o.calls; }));
  Escape escape;
  run(io, escape);
  CHECK(owner->calls == 1);
  CHECK(owner->errors.empty());
  CHECK(escape.what.empty());
}

TEST_CASE("guarded: an exception thrown by the handler goes to its owner only") {
  boost::asio::io_context io;
  auto owner = std::make_shared<Owner>();
  auto other = std::make_shared<Owner>();
  boost::asio::post(io, sluice::guarded(owner, [](Owner&) -> void {
                      throw std::length_error("field value too large");
                    }));
  boost::asio::post(io, sluice::guarded(other, [](Owner& o) { ++o.calls; }));
  Escape escape;
  run(io, escape);
  REQUIRE(owner->errors == std::vector<std::string>{"field value too large"});
  CHECK(other->calls == 1);
  CHECK(other->errors.empty());
  CHECK(escape.what.empty());  // caught where it was thrown
}

TEST_CASE("guarded: an operation that throws while holding the handler reports it") {
  // What Beast's parser does inside a composed read: the intermediate step
  // throws, and the completion handler it holds is destroyed unrun.
  boost::asio::io_context io;
  auto owner = std::make_shared<Owner>();
  auto later = std::make_shared<Owner>();
  boost::asio::post(io, [h = sluice::guarded(owner, [](Owner& o) { ++o.calls; })]() mutable {
    throw std::length_error("field value too large");
  });
  boost::asio::post(io, sluice::guarded(later, [](Owner& o) { ++o.calls; }));
  Escape escape;
  run(io, escape);
  CHECK(owner->calls == 0);
  REQUIRE(owner->errors.size() == 1);
  // The exception still left run(); run_guarded knows it was reported and went on.
  REQUIRE(escape.what == std::vector<std::string>{"field value too large"});
  CHECK(escape.reported == std::vector<bool>{true});
  CHECK(later->calls == 1);
}

TEST_CASE("run_guarded: an exception from an unguarded handler is passed on, unreported") {
  boost::asio::io_context io;
  int after = 0;
  boost::asio::post(io, []() -> void { throw std::runtime_error("boom"); });
  boost::asio::post(io, [&] { ++after; });
  Escape escape;
  run(io, escape);
  CHECK(escape.what == std::vector<std::string>{"boom"});
  CHECK(escape.reported == std::vector<bool>{false});
  CHECK(after == 1);
}

}  // namespace guarded_test
