// Work to run soon on a worker, after the handler running now: what
// post_soon() queues from the worker's own thread waits in its io_context's
// SoonQueue, and one posted handler runs the queue, including what the tasks
// it runs queue in turn. Asio's scheduler asks epoll for events (a system
// call) once per pass over its handlers, so a chain of posted handlers, each
// posting the next (an HTTP/2 stream's steps: the request to the upstream
// connection, its flush, the response back to the client stream, its flush),
// cost one such call per link, about ten per gRPC call; queued here, a chain
// runs in one pass. A pass runs at most kMaxPerPass tasks, then yields to the
// events that came meanwhile, so nothing waits behind an endless chain. From
// another thread, post_soon() is asio::post(). Header-only.
#pragma once

#include <cstddef>
#include <deque>
#include <utility>

#include <boost/asio/execution_context.hpp>
#include <boost/asio/post.hpp>

#include "common/inline_function.hpp"

namespace sluice {

class SoonQueue : public boost::asio::execution_context::service {
 public:
  using key_type = SoonQueue;
  static inline boost::asio::execution_context::id id;
  static constexpr std::size_t kMaxPerPass = 256;

  explicit SoonQueue(boost::asio::execution_context& context) : service(context) {}

  // Queues `fn` to run after the handler running now (in order with the rest).
  template <class Executor, class Fn>
  void add(const Executor& ex, Fn&& fn) {
    tasks_.emplace_back(std::forward<Fn>(fn));
    if (!drain_posted_) post_drain(ex);
  }

  std::size_t queued() const { return tasks_.size(); }

 private:
  using Task = InlineFunction<void(), 64>;

  template <class Executor>
  void post_drain(const Executor& ex) {
    drain_posted_ = true;
    boost::asio::post(ex, [this, ex] { drain(ex); });
  }

  // Runs the tasks queued, and those they queue, up to kMaxPerPass; what is
  // left (also after a task threw) goes in the next pass.
  template <class Executor>
  void drain(const Executor& ex) {
    struct Next {
      SoonQueue& queue;
      const Executor& ex;
      ~Next() {
        if (queue.tasks_.empty()) {
          queue.drain_posted_ = false;
        } else {
          queue.post_drain(ex);
        }
      }
    } next{*this, ex};
    for (std::size_t n = 0; n < kMaxPerPass && !tasks_.empty(); ++n) {
      Task task = std::move(tasks_.front());
      tasks_.pop_front();
      task();
    }
  }

  void shutdown() override { std::deque<Task>().swap(tasks_); }

  std::deque<Task> tasks_;
  bool drain_posted_ = false;
};

// Runs `fn` on `ex` soon: queued in its SoonQueue from the executor's own
// thread, else posted.
template <class Executor, class Fn>
void post_soon(const Executor& ex, Fn&& fn) {
  if (!ex.running_in_this_thread()) {
    boost::asio::post(ex, std::forward<Fn>(fn));
    return;
  }
  boost::asio::use_service<SoonQueue>(ex.context()).add(ex, std::forward<Fn>(fn));
}

}  // namespace sluice
