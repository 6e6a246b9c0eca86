#include "middleware/ratelimit/delayed_request.hpp"

namespace sluice {

void DelayedRequest::client_gone() {
  gone_ = true;
  if (waiting_) timer_.cancel();
}

void DelayedRequest::wait(double seconds, Handler then) {
  if (gone_) return then(false, 0);
  waiting_ = true;
  const auto started = std::chrono::steady_clock::now();
  timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(seconds)));
  timer_.async_wait([self = shared_from_this(), started,
                     then = std::move(then)](const boost::system::error_code&) {
    self->waiting_ = false;
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    then(!self->gone_, waited);
  });
}

}  // namespace sluice
