// Many deadlines on one timer: the streams of one HTTP/2 connection each keep
// a deadline, and the connection's one timer serves them all.
//
// Moving an entry's deadline costs no timer operation and no system call
// (only a deadline earlier than the timer's re-arms it), and an entry that
// ends just leaves the list. That is the point: cancelling a pending Asio
// timer completes its wait, which runs an aborted handler through the event
// loop (a pass, and a poll of the reactor) for every stream that ends in time,
// that is nearly every stream.
//
// The timer waits for the earliest deadline it was given. When it fires, each
// entry whose deadline has passed leaves the list and is told
// (deadline_passed()); the timer then waits for the earliest deadline left.
// An entry's deadline that moved later since is simply found later.
//
// The sweep is a member of its owner (held by a shared_ptr, with
// enable_shared_from_this), which the timer's wait holds. An entry unlinks
// itself when destroyed. Everything runs on the owner's executor.
// Header-only and generic, so that any folder can use it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/intrusive/list.hpp>
#include <boost/system/error_code.hpp>

#include "common/guarded.hpp"

namespace sluice {

template <class Executor>
class DeadlineSweep;

using SweepHook =
    boost::intrusive::list_base_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>>;

// One deadline in a DeadlineSweep (a base of the object it guards).
class SweptDeadline : public SweepHook {
 public:
  using Clock = std::chrono::steady_clock;

  SweptDeadline(const SweptDeadline&) = delete;
  SweptDeadline& operator=(const SweptDeadline&) = delete;

  // Whether a deadline is set.
  bool deadline_set() const { return is_linked(); }
  // No deadline until the next DeadlineSweep::expires_after.
  void clear_deadline() { unlink(); }

 protected:
  SweptDeadline() = default;
  ~SweptDeadline() = default;  // unlinks (auto_unlink)

  // The deadline passed (it is cleared first). It must not throw: the object
  // keeps itself alive through the call and hands errors to its own owner.
  virtual void deadline_passed() noexcept = 0;

 private:
  template <class Executor>
  friend class DeadlineSweep;
  Clock::time_point due_{};
};

// A deadline of the sweep's owner itself (a connection idle too long): calls
// Passed on it, any exception handed to its on_internal_error.
template <class Owner, void (Owner::*Passed)()>
class OwnerDeadline final : public SweptDeadline {
 public:
  explicit OwnerDeadline(Owner& owner) : owner_(owner) {}

 private:
  void deadline_passed() noexcept override {
    call_guarded(owner_, false, [this] {
      (owner_.*Passed)();
      return true;
    });
  }

  Owner& owner_;
};

template <class Executor>
class DeadlineSweep {
 public:
  using Clock = std::chrono::steady_clock;

  explicit DeadlineSweep(const Executor& executor) : timer_(executor) {}
  DeadlineSweep(const DeadlineSweep&) = delete;
  DeadlineSweep& operator=(const DeadlineSweep&) = delete;

  // The entry's deadline is now `timeout` from now. `owner` (the sweep's)
  // stays alive while the timer waits.
  template <class Owner>
  void expires_after(SweptDeadline& entry, Clock::duration timeout, Owner& owner) {
    entry.due_ = Clock::now() + timeout;
    // Taken off whatever list it was on (another sweep's, or a sweep's
    // entries due now) and put on this one.
    entry.unlink();
    entries_.push_back(entry);
    if (!armed_ || entry.due_ < expiry_) arm(entry.due_, owner);
  }

  // The owner closes: the timer stops if no entry waits (an entry that
  // outlives its connection keeps it).
  void stop_if_idle() {
    if (!entries_.empty() || !armed_) return;
    armed_ = false;
    ++generation_;
    timer_.cancel();
  }

  bool armed() const { return armed_; }

 private:
  using List = boost::intrusive::list<SweptDeadline, boost::intrusive::base_hook<SweepHook>,
                                      boost::intrusive::constant_time_size<false>>;

  template <class Owner>
  void arm(Clock::time_point at, Owner& owner) {
    armed_ = false;         // until the new wait is pending
    timer_.expires_at(at);  // a pending wait is superseded (generation)
    timer_.async_wait([this, keep = owner.shared_from_this(), generation = ++generation_](
                          const boost::system::error_code& ec) {
      if (generation != generation_) return;
      armed_ = false;
      if (!ec) sweep(*keep);
    });
    // Only once a wait is pending (an allocation that threw leaves it
    // unarmed, and the next deadline set arms it).
    armed_ = true;
    expiry_ = at;
  }

  template <class Owner>
  void sweep(Owner& owner) {
    const auto now = Clock::now();
    List due;
    for (auto it = entries_.begin(); it != entries_.end();) {
      SweptDeadline& entry = *it++;
      if (entry.due_ > now) continue;
      entry.unlink();
      due.push_back(entry);
    }
    // An entry told may end others (their destructors take them off `due`)
    // or set deadlines, its own or others' (which puts them on entries_).
    while (!due.empty()) {
      SweptDeadline& entry = due.front();
      due.pop_front();
      entry.deadline_passed();
    }
    auto earliest = Clock::time_point::max();
    for (const SweptDeadline& entry : entries_) earliest = std::min(earliest, entry.due_);
    if (earliest != Clock::time_point::max() && (!armed_ || earliest < expiry_)) {
      arm(earliest, owner);
    }
  }

  boost::asio::basic_waitable_timer<Clock, boost::asio::wait_traits<Clock>, Executor> timer_;
  List entries_;
  Clock::time_point expiry_{};
  std::uint64_t generation_ = 0;
  bool armed_ = false;
};

}  // namespace sluice
