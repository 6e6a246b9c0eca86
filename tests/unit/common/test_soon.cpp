// common/soon.hpp: what a worker queues to run after the handler running now.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "common/soon.hpp"

namespace {

namespace asio = boost::asio;

}  // namespace

TEST_CASE("soon: queued tasks run in one posted pass after the turn's handlers, flushes last",
          "[soon]") {
  asio::io_context io;
  std::vector<std::string> done;
  const auto ex = io.get_executor();
  asio::post(io, [&done, ex] {
    sluice::post_last(ex, [&done] { done.push_back("flush"); });
    sluice::post_soon(ex, [&done, ex] {
      done.push_back("a");
      // Queued by a task: still before the flush.
      sluice::post_soon(ex, [&done] { done.push_back("c"); });
    });
    sluice::post_soon(ex, [&done] { done.push_back("b"); });
    done.push_back("handler");
  });
  // Another completion of the same turn runs before the pass (its steps,
  // queued too, share the pass and the flush).
  asio::post(io, [&done, ex] {
    done.push_back("second handler");
    sluice::post_soon(ex, [&done] { done.push_back("d"); });
  });
  CHECK(io.run_one() == 1);
  CHECK(io.run_one() == 1);
  CHECK(done == std::vector<std::string>{"handler", "second handler"});
  CHECK(io.run_one() == 1);  // the pass
  CHECK(done ==
        std::vector<std::string>{"handler", "second handler", "a", "b", "d", "c", "flush"});
  CHECK(io.poll() == 0);
}

TEST_CASE("soon: a pass runs at most kMaxPerPass tasks, then yields to the event loop",
          "[soon]") {
  asio::io_context io;
  const auto ex = io.get_executor();
  const std::size_t total = sluice::SoonQueue::kMaxPerPass + 10;
  std::size_t ran = 0;
  int flushes = 0;
  asio::post(io, [&, ex] {
    for (std::size_t i = 0; i < total; ++i) sluice::post_soon(ex, [&ran] { ++ran; });
    sluice::post_last(ex, [&flushes] { ++flushes; });
  });
  CHECK(io.run_one() == 1);
  CHECK(io.run_one() == 1);  // the first pass
  CHECK(ran == sluice::SoonQueue::kMaxPerPass);
  CHECK(flushes == 1);  // the last lane is not held up by a long first one
  io.run();
  CHECK(ran == total);
  CHECK(flushes == 1);
}

TEST_CASE("soon: from another thread, post_soon is a post", "[soon]") {
  asio::io_context io;
  bool ran = false;
  // Not running io: the executor's thread is not this one.
  sluice::post_soon(io.get_executor(), [&ran] { ran = true; });
  CHECK_FALSE(ran);
  CHECK(io.run_one() == 1);
  CHECK(ran);
}

TEST_CASE("soon: run_soon_now runs the queue inside the handler; the posted pass finds nothing",
          "[soon]") {
  asio::io_context io;
  std::vector<std::string> done;
  const auto ex = io.get_executor();
  asio::post(io, [&done, ex] {
    sluice::post_last(ex, [&done] { done.push_back("flush"); });
    sluice::post_soon(ex, [&done, ex] {
      done.push_back("a");
      sluice::run_soon_now(ex);  // inside a pass: nothing more
    });
    sluice::run_soon_now(ex);  // an HTTP/2 read ends: what its frames started goes now
    done.push_back("handler");
    sluice::post_soon(ex, [&done] { done.push_back("b"); });
  });
  CHECK(io.run_one() == 1);
  CHECK(done == std::vector<std::string>{"a", "flush", "handler"});
  io.run();  // the pass posted with "a", then the one for "b"
  CHECK(done == std::vector<std::string>{"a", "flush", "handler", "b"});
  sluice::run_soon_now(ex);  // not on the worker's thread: nothing
}
