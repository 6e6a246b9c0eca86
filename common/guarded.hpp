// Exceptions on the data path. Handlers and Beast's parsing inside composed
// operations can throw (an allocation failure, a container's length check);
// such an exception must end at most the one connection it concerns, never a
// worker thread or the process.
//
// - guarded(owner, fn) wraps a completion handler of `owner` (held by a
//   shared_ptr). An exception thrown by fn is caught and handed to
//   owner.on_internal_error(what). If the handler is instead destroyed without
//   having run while an exception unwinds, the operation that held it threw
//   (for example Beast's parser inside async_read_some): the owner is told too.
//   The owner's on_internal_error(std::string_view) may be called more than
//   once for one exception and must be idempotent (close the connection once).
// - call_guarded(owner, failed, fn) runs fn() for a C library's callback,
//   which no exception may cross: one thrown is handed to
//   owner.on_internal_error(what), and `failed` is returned instead.
// - run_guarded(io, on_escape) runs an io_context until it has no work, and
//   resumes it after an exception that escaped a handler, so that one
//   handler's failure does not stop the others.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string_view>
#include <utility>

#include <boost/asio/io_context.hpp>

namespace sluice {

namespace guarded_detail {
// Set when an unwinding handler already reported the exception to its owner,
// so that run_guarded does not count the same exception twice.
inline thread_local bool reported = false;
}  // namespace guarded_detail

template <class Owner, class Fn>
class GuardedHandler {
 public:
  GuardedHandler(std::shared_ptr<Owner> owner, Fn fn)
      : owner_(std::move(owner)), fn_(std::move(fn)) {}
  GuardedHandler(GuardedHandler&& other) noexcept
      : owner_(std::move(other.owner_)), fn_(std::move(other.fn_)) {}
  GuardedHandler(const GuardedHandler&) = default;  // std::function needs copies
  GuardedHandler& operator=(GuardedHandler&&) = delete;
  GuardedHandler& operator=(const GuardedHandler&) = delete;

  ~GuardedHandler() {
    if (owner_ && std::uncaught_exceptions() > 0) {
      guarded_detail::reported = true;
      owner_->on_internal_error("exception inside an I/O operation");
    }
  }

  template <class... Args>
  void operator()(Args&&... args) {
    auto owner = std::move(owner_);  // run at most once; disarms the destructor
    try {
      fn_(*owner, std::forward<Args>(args)...);
    } catch (const std::exception& e) {
      owner->on_internal_error(e.what());
    } catch (...) {
      owner->on_internal_error("unknown exception");
    }
    // A handler unwound inside fn_ may have reported this exception already:
    // it stopped here, so run_guarded must not take it for its own.
    guarded_detail::reported = false;
  }

 private:
  std::shared_ptr<Owner> owner_;
  Fn fn_;
};

template <class Owner, class Fn>
GuardedHandler<Owner, Fn> guarded(std::shared_ptr<Owner> owner, Fn fn) {
  return GuardedHandler<Owner, Fn>(std::move(owner), std::move(fn));
}

template <class Owner, class Fn>
auto call_guarded(Owner& owner, decltype(std::declval<Fn&>()()) failed, Fn fn) noexcept
    -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::exception& e) {
    owner.on_internal_error(e.what());
  } catch (...) {
    owner.on_internal_error("unknown exception");
  }
  return failed;
}

// Runs `io` until it runs out of work. An exception that escapes a handler is
// passed to on_escape (what, already_reported) and the loop goes on.
inline void run_guarded(boost::asio::io_context& io,
                        const std::function<void(std::string_view, bool)>& on_escape) {
  for (;;) {
    try {
      io.run();
      return;
    } catch (const std::exception& e) {
      on_escape(e.what(), std::exchange(guarded_detail::reported, false));
    } catch (...) {
      on_escape("unknown exception", std::exchange(guarded_detail::reported, false));
    }
  }
}

}  // namespace sluice
