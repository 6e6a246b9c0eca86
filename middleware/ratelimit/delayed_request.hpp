// One request whose tokens were reserved, waiting for them: a timer on the
// worker's executor (no thread blocks) that a client leaving ends early. Made
// before the limiter is asked, so that a client that leaves during the call
// is known when the decision comes. Used on the worker's executor only; the
// handler of wait() is called there exactly once: when the wait is over, or
// inside client_gone() when the client leaves first (inside wait() when it
// had already left).
#pragma once

#include <chrono>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/inline_function.hpp"

namespace sluice {

class DelayedRequest : public std::enable_shared_from_this<DelayedRequest> {
 public:
  using Executor = boost::asio::io_context::executor_type;
  // Called once: `went` is true when the wait ran its course (the request
  // goes), false when the client left first; `waited` is how long it waited.
  // Move-only (it holds the request's completion).
  using Handler = InlineFunction<void(bool went, double waited), 64>;

  explicit DelayedRequest(const Executor& executor) : timer_(executor) {}

  // The client closed its connection: a wait in progress ends now (its
  // handler is called in this call), and a wait asked for later ends at once.
  void client_gone();

  // Waits `seconds`, then calls `then(true, waited)`; calls `then(false, waited)`
  // as soon as the client leaves (at once if it already has).
  void wait(double seconds, Handler then);

 private:
  void finish(bool went);

  boost::asio::steady_timer timer_;
  Handler then_;
  std::chrono::steady_clock::time_point started_;
  bool gone_ = false;
  bool waiting_ = false;
};

}  // namespace sluice
