// common/soon.hpp: what a worker queues to run after the handler running now.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "common/guarded.hpp"
#include "common/soon.hpp"

namespace {

namespace asio = boost::asio;

struct Owner : std::enable_shared_from_this<Owner> {
  std::vector<std::string> done;
  void on_internal_error(std::string_view what) { done.push_back("error: " + std::string(what)); }
};

}  // namespace

TEST_CASE("soon: a guarded handler's queued tasks run as it returns, flushes last",
          "[soon]") {
  asio::io_context io;
  auto owner = std::make_shared<Owner>();
  const auto ex = io.get_executor();
  asio::post(io, sluice::guarded(owner, [ex](Owner& o) {
               sluice::post_last(ex, [&o] { o.done.push_back("flush"); });
               sluice::post_soon(ex, [&o, ex] {
                 o.done.push_back("a");
                 // Queued by a task: still before the flush.
                 sluice::post_soon(ex, [&o] { o.done.push_back("c"); });
               });
               sluice::post_soon(ex, [&o] { o.done.push_back("b"); });
               o.done.push_back("handler");
             }));
  // One handler run: the tasks ran inside it, nothing was posted for them.
  CHECK(io.run_one() == 1);
  CHECK(owner->done == std::vector<std::string>{"handler", "a", "b", "c", "flush"});
  CHECK(io.poll() == 0);
}

TEST_CASE("soon: queued outside a guarded handler, the tasks run in a posted pass", "[soon]") {
  asio::io_context io;
  std::vector<std::string> done;
  const auto ex = io.get_executor();
  asio::post(io, [&done, ex] {
    sluice::post_last(ex, [&done] { done.push_back("flush"); });
    sluice::post_soon(ex, [&done] { done.push_back("a"); });
    done.push_back("handler");
  });
  CHECK(io.run_one() == 1);
  CHECK(done == std::vector<std::string>{"handler"});
  CHECK(io.run_one() == 1);  // the pass
  CHECK(done == std::vector<std::string>{"handler", "a", "flush"});
}

TEST_CASE("soon: a pass runs at most kMaxPerPass tasks, then yields to the event loop",
          "[soon]") {
  asio::io_context io;
  auto owner = std::make_shared<Owner>();
  const auto ex = io.get_executor();
  const std::size_t total = sluice::SoonQueue::kMaxPerPass + 10;
  std::size_t ran = 0;
  int flushes = 0;
  asio::post(io, sluice::guarded(owner, [&, ex](Owner&) {
               for (std::size_t i = 0; i < total; ++i) sluice::post_soon(ex, [&ran] { ++ran; });
               sluice::post_last(ex, [&flushes] { ++flushes; });
             }));
  CHECK(io.run_one() == 1);
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
