// The lazily re-armed deadline: moving it later does not fire early, moving
// it earlier does, clearing it fires nothing, and the tag of the latest
// setting is the one reported.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "common/deadline.hpp"

using namespace sluice;
using namespace std::chrono_literals;

namespace {

using Executor = boost::asio::io_context::executor_type;

struct Owner : std::enable_shared_from_this<Owner> {
  explicit Owner(boost::asio::io_context& io) : deadline(io.get_executor()) {}
  void on_deadline(int tag) {
    tags.push_back(tag);
    at = std::chrono::steady_clock::now();
  }
  void on_internal_error(std::string_view) noexcept {}
  Deadline<Executor, int> deadline;
  std::vector<int> tags;
  std::chrono::steady_clock::time_point at{};
};

}  // namespace

TEST_CASE("a deadline moved later fires once, at the latest time, with its tag", "[deadline]") {
  boost::asio::io_context io;
  auto owner = std::make_shared<Owner>(io);
  const auto start = std::chrono::steady_clock::now();
  owner->deadline.expires_after(1, 5ms, *owner);
  owner->deadline.expires_after(2, 40ms, *owner);
  io.run();
  REQUIRE(owner->tags == std::vector<int>{2});
  CHECK(owner->at - start >= 40ms);
}

TEST_CASE("a deadline moved earlier fires at the earlier time", "[deadline]") {
  boost::asio::io_context io;
  auto owner = std::make_shared<Owner>(io);
  const auto start = std::chrono::steady_clock::now();
  owner->deadline.expires_after(1, 10s, *owner);
  owner->deadline.expires_after(2, 5ms, *owner);
  io.run();
  REQUIRE(owner->tags == std::vector<int>{2});
  CHECK(owner->at - start < 5s);
}

TEST_CASE("a cleared or cancelled deadline fires nothing", "[deadline]") {
  boost::asio::io_context io;
  auto owner = std::make_shared<Owner>(io);
  owner->deadline.expires_after(1, 5ms, *owner);
  owner->deadline.clear();
  io.run();
  CHECK(owner->tags.empty());

  io.restart();
  owner->deadline.expires_after(1, 5ms, *owner);
  owner->deadline.cancel();
  io.run();
  CHECK(owner->tags.empty());
}
