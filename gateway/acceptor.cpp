#include "gateway/acceptor.hpp"

#include <exception>

#include <spdlog/spdlog.h>

namespace sluice {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

bool bind_acceptor(tcp::acceptor& acceptor, const HostPort& where, const char* what) {
  boost::system::error_code ec;
  tcp::endpoint endpoint;
  try {
    endpoint = {asio::ip::make_address(where.host), where.port};
  } catch (const std::exception& e) {
    spdlog::error("{} {}: bad address: {}", what, where.to_string(), e.what());
    return false;
  }
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    spdlog::error("cannot listen on {} ({}): {}", where.to_string(), what, ec.message());
    return false;
  }
  return true;
}

void AcceptBackoff::note_failure(const boost::system::error_code& ec, MetricsShard& metrics) {
  metrics.add("sluice_accept_errors_total", label("listener", listener_));
  ++unreported_;
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_report_) {
    spdlog::warn("{} listener: accept failed: {} ({} time(s) since the last report); backing off",
                 listener_, ec.message(), unreported_);
    unreported_ = 0;
    next_report_ = now + kLogEvery;
  }
}

}  // namespace sluice
