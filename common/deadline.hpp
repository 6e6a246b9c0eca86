// One deadline for a sequence of I/O operations, served by one timer that is
// re-armed lazily: moving the deadline later (every read and write does)
// costs no system call; the timer is re-armed only when it fires early or the
// deadline moves earlier. The deadline carries a tag saying whose operation it
// guards (for example the client or the upstream side of a session). Header-only
// and generic, so that any folder (upstream/ too) can use it.
//
// The owner is held by a shared_ptr (enable_shared_from_this) and has
// `void on_deadline(Tag)`. That is called on the timer's executor, through
// guarded(), once the latest deadline set has passed; a wait superseded by a
// later arming (generation) or cancelled does nothing.
#pragma once

#include <chrono>
#include <cstdint>

#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/system/error_code.hpp>

#include "common/guarded.hpp"

namespace sluice {

template <class Executor, class Tag>
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Deadline(const Executor& executor) : timer_(executor) {}

  // The deadline is now `timeout` from now, for `tag`; `owner` is told when it passes.
  template <class Owner>
  void expires_after(Tag tag, Clock::duration timeout, Owner& owner) {
    tag_ = tag;
    deadline_ = Clock::now() + timeout;
    if (!armed_ || deadline_ < timer_.expiry()) arm(owner);
  }

  // No deadline until the next expires_after; a pending wait then does nothing.
  void clear() { deadline_ = Clock::time_point::max(); }

  // Stops the timer (the owner closes).
  void cancel() { timer_.cancel(); }

  Tag tag() const { return tag_; }

 private:
  template <class Owner>
  void arm(Owner& owner) {
    armed_ = true;
    timer_.expires_at(deadline_);  // a pending wait is superseded (generation)
    const auto generation = ++generation_;
    timer_.async_wait(guarded(owner.shared_from_this(),
                              [this, generation](Owner& self, boost::system::error_code ec) {
                                if (generation != generation_) return;
                                armed_ = false;
                                if (ec || deadline_ == Clock::time_point::max())
                                  return;  // closed, or cleared
                                if (Clock::now() < deadline_) return arm(self);  // moved later
                                self.on_deadline(tag_);
                              }));
  }

  boost::asio::basic_waitable_timer<Clock, boost::asio::wait_traits<Clock>, Executor> timer_;
  Clock::time_point deadline_ = Clock::time_point::max();
  std::uint64_t generation_ = 0;
  Tag tag_{};
  bool armed_ = false;
};

}  // namespace sluice
