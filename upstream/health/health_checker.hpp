// The active health checker of one upstream server: every interval it
// connects (with TLS when its upstream speaks TLS, verifying the server as
// requests do), sends the check's GET (over HTTP/2 for an HTTP/2 upstream)
// and reads the status line (the :status), all within
// the check's timeout, and reports one result per check. A refused or failed
// connect, a timeout, a close before the status line, a line that is not an
// HTTP status line, or a status that is not expected, is a failure.
//
// It runs on the io_context it is given (the main thread's); reports arrive
// there, never from inside start(). The first check starts at once. After
// stop() (or destruction) no report is made and nothing of it stays pending
// beyond the cancelled operations.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "upstream/upstream_config.hpp"

namespace boost::asio {
class io_context;
}

namespace sluice {

struct HealthCheckResult {
  bool ok = false;
  std::string detail;  // "status 200", "status 503", "connect: Connection refused", "timed out"
};

class HealthChecker {
 public:
  using Report = std::function<void(const HealthCheckResult&)>;

  // `tls`: the upstream's TLS settings, or null for plain TCP; `protocol`:
  // HTTP/2 upstreams are checked over HTTP/2 (a GET stream on a connection
  // made for the check).
  HealthChecker(boost::asio::io_context& io, HostPort server, HealthCheckConfig check,
                std::shared_ptr<const UpstreamTls> tls, Report report,
                UpstreamProtocol protocol = UpstreamProtocol::kHttp1);
  ~HealthChecker();
  HealthChecker(const HealthChecker&) = delete;
  HealthChecker& operator=(const HealthChecker&) = delete;

  void start();
  void stop();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice
