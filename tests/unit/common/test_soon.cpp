// common/soon.hpp: what a worker queues to run after the handler running now.
#include <catch2/catch.hpp>

#include <optional>
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

TEST_CASE("soon: a batch runs the queue inside the handler and posts no pass", "[soon]") {
  asio::io_context io;
  std::vector<std::string> done;
  const auto ex = io.get_executor();
  asio::post(io, [&done, ex] {
    sluice::SoonBatch batch(ex);  // an HTTP/2 read
    sluice::post_last(ex, [&done] { done.push_back("flush"); });
    sluice::post_soon(ex, [&done, ex] {
      done.push_back("a");
      sluice::SoonBatch inner(ex);
      inner.run();  // inside a pass: nothing more
    });
    batch.run();  // the read ends: what its frames started goes now
    done.push_back("handler");
  });
  CHECK(io.run_one() == 1);
  CHECK(done == std::vector<std::string>{"a", "flush", "handler"});
  CHECK(io.poll() == 0);  // no pass was posted: the event loop polls once less
  sluice::SoonBatch off_thread(ex);  // not on the worker's thread: nothing
  off_thread.run();
  CHECK(io.poll() == 0);
}

TEST_CASE("soon: what a batch queues and does not run is posted as the batch ends", "[soon]") {
  asio::io_context io;
  std::vector<std::string> done;
  const auto ex = io.get_executor();
  asio::post(io, [&done, ex] {
    {
      sluice::SoonBatch batch(ex);
      sluice::post_soon(ex, [&done] { done.push_back("a"); });
      batch.run();
      sluice::post_soon(ex, [&done] { done.push_back("b"); });  // after run()
      CHECK(done == std::vector<std::string>{"a"});
    }
    {
      sluice::SoonBatch batch(ex);  // left early (an error): never run()
      sluice::post_soon(ex, [&done] { done.push_back("c"); });
    }
    done.push_back("handler");
  });
  CHECK(io.run_one() == 1);
  CHECK(done == std::vector<std::string>{"a", "handler"});
  CHECK(io.run() == 1);  // one pass for both
  CHECK(done == std::vector<std::string>{"a", "handler", "b", "c"});
}

TEST_CASE("soon: a batch with more than a pass's share queued posts the rest", "[soon]") {
  asio::io_context io;
  const auto ex = io.get_executor();
  const std::size_t total = sluice::SoonQueue::kMaxPerPass + 10;
  std::size_t ran = 0;
  asio::post(io, [&, ex] {
    sluice::SoonBatch batch(ex);
    for (std::size_t i = 0; i < total; ++i) sluice::post_soon(ex, [&ran] { ++ran; });
    batch.run();
    CHECK(ran == sluice::SoonQueue::kMaxPerPass);
  });
  CHECK(io.run_one() == 1);
  CHECK(io.run() == 1);  // one posted pass for the rest
  CHECK(ran == total);
}

TEST_CASE("soon: a batch that ran a posted pass's tasks leaves that pass to take later ones",
          "[soon]") {
  asio::io_context io;
  std::vector<std::string> done;
  const auto ex = io.get_executor();
  asio::post(io, [&done, ex] {  // an ordinary completion: its task posts a pass
    sluice::post_soon(ex, [&done] { done.push_back("a"); });
  });
  asio::post(io, [&done, ex] {  // an HTTP/2 read of the same turn runs it
    sluice::SoonBatch batch(ex);
    batch.run();
    done.push_back("read");
  });
  asio::post(io, [&done, ex] {  // a later completion: the pass still posted takes its task
    sluice::post_soon(ex, [&done] { done.push_back("b"); });
  });
  CHECK(io.run() == 4);  // three handlers and one pass, not a second pass
  CHECK(done == std::vector<std::string>{"a", "read", "b"});
}

TEST_CASE("soon: a new io_context where an old one was gets a queue of its own", "[soon]") {
  // A thread remembers the queue of the context it ran last: one made at the
  // same address after the old one went must not find the old queue.
  std::optional<asio::io_context> io;
  for (int round = 0; round < 3; ++round) {
    io.emplace();
    const auto ex = io->get_executor();
    int ran = 0;
    sluice::SoonQueue* found = nullptr;
    asio::post(*io, [&ran, &found, ex] {
      found = sluice::soon_detail::own_queue(ex);
      sluice::post_soon(ex, [&ran] { ++ran; });
      sluice::post_soon(ex, [&ran] { ++ran; });
    });
    io->run();
    CHECK(found == &asio::use_service<sluice::SoonQueue>(*io));
    CHECK(ran == 2);
    io.reset();
  }
}
