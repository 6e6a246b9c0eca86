// What both listeners (data plane and admin) do with a listening socket:
// bind it, and back off when an accept fails. Used on the main thread only.
#pragma once

#include <algorithm>
#include <chrono>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>

#include "gateway/config/config.hpp"
#include "gateway/metrics.hpp"

namespace sluice {

// Opens, binds and listens; false, with the reason logged, when `where` is no
// address or cannot be listened on. `what` names the config key in the log.
bool bind_acceptor(boost::asio::ip::tcp::acceptor& acceptor, const HostPort& where,
                   const char* what);

// A listener whose accept fails (out of descriptors and the like) backs off,
// doubling from kMin to kMax, instead of spinning, counts every failure in
// sluice_accept_errors_total{listener} and logs at most once per kLogEvery.
class AcceptBackoff {
 public:
  static constexpr std::chrono::milliseconds kMin{10};
  static constexpr std::chrono::milliseconds kMax{1000};
  static constexpr std::chrono::seconds kLogEvery{5};

  AcceptBackoff(boost::asio::io_context& io, std::string_view listener)
      : timer_(io), listener_(listener) {}

  // Counts and maybe logs `ec`, then calls `retry` on the io_context after the delay.
  template <class Retry>
  void failed(const boost::system::error_code& ec, MetricsShard& metrics, Retry retry) {
    note_failure(ec, metrics);
    timer_.expires_after(delay_);
    delay_ = std::min(delay_ * 2, std::chrono::milliseconds{kMax});
    timer_.async_wait([retry = std::move(retry)](boost::system::error_code e) {
      if (!e) retry();
    });
  }
  void succeeded() { delay_ = kMin; }
  void cancel() { timer_.cancel(); }

 private:
  void note_failure(const boost::system::error_code& ec, MetricsShard& metrics);

  boost::asio::steady_timer timer_;
  std::string_view listener_;
  std::chrono::milliseconds delay_{kMin};
  std::size_t unreported_ = 0;
  std::chrono::steady_clock::time_point next_report_{};
};

}  // namespace sluice
