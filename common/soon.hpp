// Work to run soon on a worker, after the handler running now: what
// post_soon() queues from the worker's own thread waits in its io_context's
// SoonQueue, and one posted handler runs the queue (a pass), including what
// the tasks it runs queue in turn. Asio's scheduler asks epoll for events (a
// system call) once per pass over its handlers, so a chain of posted
// handlers, each posting the next (an HTTP/2 stream's steps: the request to
// the upstream connection, its flush, the response back to the client
// stream, its flush), cost one such call per link, about ten per gRPC call;
// queued here, a chain runs in one pass.
//
// The pass is posted, not run as the handler that queued its first task
// returns: it runs after the other completions of the same turn (every
// upstream response that came in one wait for events), so that what they
// all give one client connection goes in one write. An HTTP/2 connection's
// read is a batch of its own (every frame that came at once): it runs the
// pass as it ends (a SoonBatch), so that what its frames started (a gRPC
// call's stream to its upstream, a response back to its client) goes out
// without a further pass of the event loop, and posts none while it reads: a
// posted pass that finds nothing left still costs the event loop a poll of
// its own (a system call per read). A pass runs at most
// kMaxPerPass tasks, then yields to the events that came meanwhile (the
// rest in the next pass), so nothing waits behind an endless chain. From
// another thread, post_soon() is asio::post().
//
// post_last() queues in a second lane, run once the first is empty (or its
// pass's share ran): a connection's flush, so that what a pass's tasks give
// one connection to send (an upstream request's HEADERS, its DATA and the
// END_STREAM that follows) goes in one write, not one per task. Header-only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <type_traits>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "common/inline_function.hpp"

namespace sluice {

class SoonQueue : public boost::asio::execution_context::service {
 public:
  using key_type = SoonQueue;
  static inline boost::asio::execution_context::id id;
  static constexpr std::size_t kMaxPerPass = 256;

  // `context` is an io_context (post_soon() asks for its executors).
  explicit SoonQueue(boost::asio::execution_context& context)
      : service(context), io_(static_cast<boost::asio::io_context&>(context)) {}
  // A queue gone makes every thread's remembered queue (own_queue) stale: a
  // new io_context may take the old one's address.
  ~SoonQueue() override { generation.fetch_add(1, std::memory_order_release); }

  static inline std::atomic<std::uint64_t> generation{0};

  // Queues `fn` to run after the handler running now (in order with the rest).
  template <class Fn>
  void add(Fn&& fn) {
    tasks_.emplace_back(std::forward<Fn>(fn));
    schedule();
  }

  // Queues `fn` to run after the tasks queued now and those they queue.
  template <class Fn>
  void add_last(Fn&& fn) {
    last_.emplace_back(std::forward<Fn>(fn));
    schedule();
  }

  std::size_t queued() const { return tasks_.size() + last_.size(); }

  // Runs the pass now, from the handler running (not from inside a pass); a
  // pass still posted then finds nothing left.
  void run_now() {
    if (running_ || (tasks_.empty() && last_.empty())) return;
    pass(false);
  }

  // While held (a SoonBatch is open), what is queued posts no pass: the
  // batch runs it, or posts the pass as the last hold ends.
  void hold() { ++holds_; }
  void release() {
    if (--holds_ == 0 && !running_ && queued() != 0) schedule();
  }

 private:
  using Task = InlineFunction<void(), 64>;

  // A pass is due. Nothing to do while one is posted or running: it takes
  // what is queued.
  void schedule() {
    if (scheduled_ || holds_ != 0) return;
    scheduled_ = true;
    post_pass();
  }

  void post_pass() {
    boost::asio::post(io_.get_executor(), [this] { pass(true); });
  }

  // Runs the tasks queued, and those they queue, up to kMaxPerPass, then
  // the last lane's, then again while the last lane's queued more (within
  // the share); what is left (also after a task threw) goes in a posted pass
  // (`posted`: this pass is one, run from the event loop).
  void pass(bool posted) {
    running_ = true;
    struct Rest {
      SoonQueue& queue;
      bool posted;
      ~Rest() {
        queue.running_ = false;
        if (queue.tasks_.empty() && queue.last_.empty()) {
          if (posted) queue.scheduled_ = false;  // else one is still posted: it finds nothing
        } else if (posted || !queue.scheduled_) {  // else a posted pass takes the rest
          queue.scheduled_ = true;
          queue.post_pass();
        }
      }
    } rest{*this, posted};
    std::size_t n = 0;
    do {
      for (; n < kMaxPerPass && !tasks_.empty(); ++n) run_front(tasks_);
      // Those queued while these run wait for the next round.
      for (std::size_t last = last_.size(); last > 0; --last) run_front(last_);
    } while (n < kMaxPerPass && !tasks_.empty());
  }

  static void run_front(std::deque<Task>& lane) {
    Task task = std::move(lane.front());
    lane.pop_front();
    task();
  }

  void shutdown() override {
    std::deque<Task>().swap(tasks_);
    std::deque<Task>().swap(last_);
  }

  boost::asio::io_context& io_;
  std::deque<Task> tasks_;
  std::deque<Task> last_;
  bool scheduled_ = false;  // a pass is posted (or running)
  bool running_ = false;    // a pass is running
  int holds_ = 0;           // SoonBatches open
};

namespace soon_detail {
template <class Executor>
SoonQueue* own_queue(const Executor& ex) {
  static_assert(std::is_same_v<decltype(ex.context()), boost::asio::io_context&>,
                "post_soon() takes an io_context's executor");
  if (!ex.running_in_this_thread()) return nullptr;
  // use_service() locks the context's registry and searches it: a thread
  // remembers the queue of the context it runs (several times a request).
  struct Remembered {
    const boost::asio::io_context* context = nullptr;
    SoonQueue* queue = nullptr;
    std::uint64_t generation = 0;
  };
  thread_local Remembered last;
  const std::uint64_t generation = SoonQueue::generation.load(std::memory_order_acquire);
  if (last.context != &ex.context() || last.generation != generation) {
    last = {&ex.context(), &boost::asio::use_service<SoonQueue>(ex.context()), generation};
  }
  return last.queue;
}
}  // namespace soon_detail

// Runs `fn` on `ex` soon: queued in its SoonQueue from the executor's own
// thread, else posted.
template <class Executor, class Fn>
void post_soon(const Executor& ex, Fn&& fn) {
  if (SoonQueue* queue = soon_detail::own_queue(ex)) return queue->add(std::forward<Fn>(fn));
  boost::asio::post(ex, std::forward<Fn>(fn));
}

// A connection's read, a batch of its own: from the handler's start what is
// queued posts no pass; run() at its end runs the queue (see
// SoonQueue::run_now). Left without run() (an error ended the read), the
// pass is posted as the batch ends; with more than a pass's share queued,
// the rest goes in a pass posted as run() returns. Does nothing off the
// worker's thread.
class SoonBatch {
 public:
  template <class Executor>
  explicit SoonBatch(const Executor& ex) : queue_(soon_detail::own_queue(ex)) {
    if (queue_ != nullptr) queue_->hold();
  }
  SoonBatch(const SoonBatch&) = delete;
  SoonBatch& operator=(const SoonBatch&) = delete;
  ~SoonBatch() {
    if (queue_ != nullptr) queue_->release();
  }

  void run() {
    if (queue_ != nullptr) queue_->run_now();
  }

 private:
  SoonQueue* queue_;
};

// Runs `fn` on `ex` once the tasks post_soon() queued (and those they queue)
// ran: a flush that gathers what they gave the connection to send. From
// another thread, asio::post().
template <class Executor, class Fn>
void post_last(const Executor& ex, Fn&& fn) {
  if (SoonQueue* queue = soon_detail::own_queue(ex)) return queue->add_last(std::forward<Fn>(fn));
  boost::asio::post(ex, std::forward<Fn>(fn));
}

}  // namespace sluice
