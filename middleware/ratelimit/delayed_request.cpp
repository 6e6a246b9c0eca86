#include "middleware/ratelimit/delayed_request.hpp"

namespace sluice {

void DelayedRequest::client_gone() {
  gone_ = true;
  // A wait in progress ends in this call, so what its handler does (a refund)
  // is under way before whatever closed the client goes on (a shutdown that
  // closes the limiter next).
  if (waiting_) finish(false);
}

void DelayedRequest::wait(double seconds, Handler then) {
  if (gone_) return then(false, 0);
  waiting_ = true;
  then_ = std::move(then);
  started_ = std::chrono::steady_clock::now();
  timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(seconds)));
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code&) {
    if (self->waiting_) self->finish(!self->gone_);
  });
}

void DelayedRequest::finish(bool went) {
  waiting_ = false;
  timer_.cancel();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  auto then = std::move(then_);
  then_ = nullptr;
  then(went, waited);
}

}  // namespace sluice
