// common/deadline_sweep.hpp: many deadlines on one timer, and no handler run
// for a deadline that is cleared.
#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>

#include <boost/asio/io_context.hpp>

#include "common/deadline_sweep.hpp"

namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using Sweep = sluice::DeadlineSweep<asio::io_context::executor_type>;

struct Owner : std::enable_shared_from_this<Owner> {
  explicit Owner(asio::io_context& io) : sweep(io.get_executor()) {}
  Sweep sweep;
};

struct Entry final : sluice::SweptDeadline {
  int told = 0;
  Clock::time_point told_at{};
  std::function<void()> then;
  void deadline_passed() noexcept override {
    ++told;
    told_at = Clock::now();
    if (then) then();
  }
};

}  // namespace

TEST_CASE("deadline sweep: each entry is told once, after its own deadline", "[deadline]") {
  asio::io_context io;
  auto owner = std::make_shared<Owner>(io);
  Entry a, b;
  const auto start = Clock::now();
  owner->sweep.expires_after(a, 20ms, *owner);
  owner->sweep.expires_after(b, 60ms, *owner);
  CHECK(a.deadline_set());
  CHECK(owner.use_count() == 2);  // the timer's wait holds its owner
  io.run_for(5s);                 // returns once nothing waits
  CHECK(a.told == 1);
  CHECK(b.told == 1);
  CHECK(a.told_at - start >= 20ms);
  CHECK(b.told_at - start >= 60ms);
  CHECK_FALSE(a.deadline_set());
  CHECK_FALSE(owner->sweep.armed());
  CHECK(owner.use_count() == 1);
}

TEST_CASE("deadline sweep: a deadline moved later is told at the later one", "[deadline]") {
  asio::io_context io;
  auto owner = std::make_shared<Owner>(io);
  Entry a;
  const auto start = Clock::now();
  owner->sweep.expires_after(a, 20ms, *owner);
  owner->sweep.expires_after(a, 80ms, *owner);
  io.run_for(5s);
  CHECK(a.told == 1);
  CHECK(a.told_at - start >= 80ms);
}

TEST_CASE("deadline sweep: a cleared or destroyed entry is never told, and clearing runs nothing",
          "[deadline]") {
  asio::io_context io;
  auto owner = std::make_shared<Owner>(io);
  Entry kept;
  auto gone = std::make_unique<Entry>();
  Entry cleared;
  owner->sweep.expires_after(cleared, 10ms, *owner);
  owner->sweep.expires_after(*gone, 10ms, *owner);
  owner->sweep.expires_after(kept, 30ms, *owner);
  cleared.clear_deadline();
  gone.reset();
  // Nothing was cancelled, so no handler is ready to run (a cancelled Asio
  // timer would have one).
  CHECK(io.poll() == 0);
  io.run_for(5s);
  CHECK(cleared.told == 0);
  CHECK(kept.told == 1);
}

TEST_CASE("deadline sweep: a deadline earlier than the timer's re-arms it", "[deadline]") {
  asio::io_context io;
  auto owner = std::make_shared<Owner>(io);
  Entry late, early;
  owner->sweep.expires_after(late, 1h, *owner);
  owner->sweep.expires_after(early, 10ms, *owner);
  io.run_for(2s);  // stops at 2 s: the late entry still waits
  CHECK(early.told == 1);
  CHECK(late.told == 0);
  CHECK(owner->sweep.armed());
  late.clear_deadline();
  owner->sweep.stop_if_idle();
  io.run_for(5s);
  CHECK(owner.use_count() == 1);
}

TEST_CASE("deadline sweep: what an entry does when told (end another, wait again) is kept",
          "[deadline]") {
  asio::io_context io;
  auto owner = std::make_shared<Owner>(io);
  auto first = std::make_unique<Entry>();
  auto second = std::make_unique<Entry>();
  Entry third;
  Entry again;
  // All four are due in one sweep. The first ends the second; the third
  // moves the fourth's deadline later and waits once more itself.
  first->then = [&] { second.reset(); };
  third.then = [&] {
    if (third.told == 1) owner->sweep.expires_after(third, 20ms, *owner);
    owner->sweep.expires_after(again, 40ms, *owner);
  };
  const auto start = Clock::now();
  owner->sweep.expires_after(*first, 10ms, *owner);
  owner->sweep.expires_after(*second, 10ms, *owner);
  owner->sweep.expires_after(third, 10ms, *owner);
  owner->sweep.expires_after(again, 10ms, *owner);
  io.run_for(5s);
  CHECK(first->told == 1);
  CHECK(second == nullptr);
  CHECK(third.told == 2);
  CHECK(again.told == 1);
  CHECK(again.told_at - start >= 40ms);
  CHECK_FALSE(owner->sweep.armed());
}

TEST_CASE("deadline sweep: a closing owner stops the timer unless an entry still waits",
          "[deadline]") {
  asio::io_context io;
  auto owner = std::make_shared<Owner>(io);
  Entry a;
  owner->sweep.expires_after(a, 20ms, *owner);
  owner->sweep.stop_if_idle();  // an entry waits: kept
  CHECK(owner->sweep.armed());
  a.clear_deadline();
  owner->sweep.stop_if_idle();
  CHECK_FALSE(owner->sweep.armed());
  CHECK(io.poll() == 1);  // the wait ends, aborted, and lets go of the owner
  CHECK(owner.use_count() == 1);
  CHECK(a.told == 0);
}

TEST_CASE("deadline sweep: an entry set on another sweep moves to it", "[deadline]") {
  asio::io_context io;
  auto first = std::make_shared<Owner>(io);
  auto second = std::make_shared<Owner>(io);
  Entry a;
  first->sweep.expires_after(a, 1h, *first);
  second->sweep.expires_after(a, 20ms, *second);
  first->sweep.stop_if_idle();  // `a` left it: nothing waits there
  CHECK_FALSE(first->sweep.armed());
  io.run_for(5s);
  CHECK(a.told == 1);
  CHECK(first.use_count() == 1);
  CHECK(second.use_count() == 1);
}
