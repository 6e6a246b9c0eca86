#include "upstream/health/health_checker.hpp"

#include <array>
#include <string_view>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "upstream/byte_stream.hpp"
#include "upstream/h2/h2_connection.hpp"
#include "upstream/health/health_probe.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

// A status line longer than this is not one.
constexpr std::size_t kMaxStatusLine = 1024;

}  // namespace

// Shared with the handlers in flight; every handler first checks that its
// check is still the current one (`attempt`) and that the checker runs.
struct HealthChecker::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io_in, HostPort server_in, HealthCheckConfig check_in,
       std::shared_ptr<const UpstreamTls> tls_in, Report report_in, UpstreamProtocol protocol_in)
      : io(io_in),
        protocol(protocol_in),
        server(std::move(server_in)),
        check(std::move(check_in)),
        tls(std::move(tls_in)),
        report(std::move(report_in)),
        request(health_check_request(check, server)),
        resolver(io),
        deadline(io),
        next(io) {}

  void run_check();
  void connect(std::vector<tcp::endpoint> endpoints);
  void run_h2_check();
  void on_h2_stream();
  void handshake();
  void send_request();
  void read_status_line();
  void finish(bool ok, std::string detail);
  void stop();
  // Each handler holds the check's stream: one whose check ended stays until
  // its cancelled operation has completed.
  template <class Fn>
  auto handler(Fn fn) {
    return [self = shared_from_this(), attempt = attempt, keep = stream,
            fn = std::move(fn)](auto&&... args) {
      if (self->stopped || attempt != self->attempt) return;
      fn(*self, std::forward<decltype(args)>(args)...);
    };
  }
  void close_stream() {
    if (h2) {
      if (h2_stream) h2->release(*h2_stream);
      h2->close();
      h2.reset();
      h2_stream.reset();
    }
    if (!stream) return;
    error_code ignored;
    stream->socket().close(ignored);
  }

  asio::io_context& io;
  const UpstreamProtocol protocol;
  std::shared_ptr<H2Connection> h2;  // an HTTP/2 check's connection
  std::shared_ptr<H2Stream> h2_stream;
  const HostPort server;
  const HealthCheckConfig check;
  const std::shared_ptr<const UpstreamTls> tls;  // null: plain TCP
  const Report report;
  const std::string request;
  std::shared_ptr<ByteStream> stream;  // the current check's connection, new for each
  tcp::resolver resolver;
  asio::steady_timer deadline;  // the current check's timeout
  asio::steady_timer next;      // the start of the next check
  std::string line;             // what was read of the status line
  std::array<char, 512> buffer{};
  std::uint64_t attempt = 0;
  bool stopped = false;
};

void HealthChecker::Impl::run_check() {
  ++attempt;
  line.clear();
  stream = std::make_shared<ByteStream>(ByteStream::socket_type(io.get_executor()));
  // The next check starts an interval after this one did, whatever this one's
  // outcome; the timeout, shorter than the interval, has ended it by then.
  next.expires_after(check.interval);
  next.async_wait([self = shared_from_this()](error_code ec) {
    if (!ec && !self->stopped) self->run_check();
  });
  deadline.expires_after(check.timeout);
  deadline.async_wait(handler([](Impl& self, error_code ec) {
    if (!ec) self.finish(false, "timed out");
  }));
  if (protocol != UpstreamProtocol::kHttp1) return run_h2_check();
  error_code ec;
  const auto address = asio::ip::make_address(server.host, ec);
  if (!ec) return connect({tcp::endpoint{address, server.port}});
  resolver.async_resolve(
      server.host, std::to_string(server.port),
      handler([](Impl& self, error_code ec, const tcp::resolver::results_type& results) {
        if (ec) return self.finish(false, "resolve: " + ec.message());
        std::vector<tcp::endpoint> endpoints;
        for (const auto& r : results) endpoints.push_back(r.endpoint());
        self.connect(std::move(endpoints));
      }));
}

void HealthChecker::Impl::connect(std::vector<tcp::endpoint> endpoints) {
  asio::async_connect(stream->socket(), endpoints,
                      handler([](Impl& self, error_code ec, const tcp::endpoint&) {
                        if (ec) return self.finish(false, "connect: " + ec.message());
                        if (self.tls) return self.handshake();
                        self.send_request();
                      }));
}

// TLS as the upstream's requests speak it: the same name verified, no session kept.
void HealthChecker::Impl::handshake() {
  TlsSocket& session = stream->use_tls(tls->context(), tls, TlsSocket::Role::kClient);
  if (!tls->prepare(session.native_handle(), server.host, nullptr)) {
    return finish(false, "TLS: cannot check a certificate against host " + server.host);
  }
  stream->tls().async_handshake(handler([](Impl& self, error_code ec) {
    if (ec) {
      return self.finish(false, "TLS: " + UpstreamTls::failure_reason(
                                             self.stream->tls_session().native_handle(),
                                             ec.message()));
    }
    self.send_request();
  }));
}

void HealthChecker::Impl::send_request() {
  asio::async_write(*stream, asio::buffer(request),
                    handler([](Impl& self, error_code ec, std::size_t) {
                      if (ec) return self.finish(false, "send: " + ec.message());
                      self.read_status_line();
                    }));
}

void HealthChecker::Impl::read_status_line() {
  stream->async_read_some(
      asio::buffer(buffer), handler([](Impl& self, error_code ec, std::size_t n) {
        self.line.append(self.buffer.data(), n);
        const auto end = self.line.find("\r\n");
        if (end == std::string::npos) {
          if (ec) return self.finish(false, "no status line: " + ec.message());
          if (self.line.size() > kMaxStatusLine) return self.finish(false, "no status line");
          return self.read_status_line();
        }
        const auto status = parse_status_line(std::string_view(self.line).substr(0, end));
        if (!status) return self.finish(false, "not an HTTP/1.x status line");
        self.finish(is_expected_status(self.check, *status), "status " + std::to_string(*status));
      }));
}

// An HTTP/2 upstream's check: a connection of its own (the TLS ones with
// ALPN h2), one GET stream, its :status.
void HealthChecker::Impl::run_h2_check() {
  auto conn = std::make_unique<UpstreamConnection>(io.get_executor());
  conn->address = server;
  conn->server = server.to_string();
  H2Connection::Options options;
  options.upstream = "health check";
  options.tls = tls;
  options.connect_timeout = check.timeout;
  options.idle_timeout = std::chrono::milliseconds{0};
  options.log_failures = false;
  h2 = std::make_shared<H2Connection>(std::move(conn), std::move(options));
  const H2HeaderBlock head = {{":method", "GET"},
                              {":scheme", tls ? "https" : "http"},
                              {":authority", server.to_string()},
                              {":path", check.path},
                              {"user-agent", "sluice-health-check"}};
  h2->connect();
  h2_stream = h2->open_stream(head, false, [weak = weak_from_this(), attempt = attempt] {
    auto self = weak.lock();
    if (!self) return;
    asio::post(self->io, [self, attempt] {
      if (!self->stopped && attempt == self->attempt) self->on_h2_stream();
    });
  });
  if (!h2_stream) finish(false, "HTTP/2 stream not opened");
}

void HealthChecker::Impl::on_h2_stream() {
  if (!h2_stream) return;
  const H2Stream& s = *h2_stream;
  if (s.state == H2Stream::State::kConnectFailed) return finish(false, s.connect_failure.reason);
  if (s.head_done()) return finish(is_expected_status(check, s.status), "status " + std::to_string(s.status));
  if (s.closed()) return finish(false, "HTTP/2 stream ended without a response");
}

// One result per check: the connection and the deadline end with it.
void HealthChecker::Impl::finish(bool ok, std::string detail) {
  ++attempt;  // what is still in flight for this check is ignored
  deadline.cancel();
  resolver.cancel();
  close_stream();
  report(HealthCheckResult{ok, std::move(detail)});
}

void HealthChecker::Impl::stop() {
  stopped = true;
  next.cancel();
  deadline.cancel();
  resolver.cancel();
  close_stream();
}

HealthChecker::HealthChecker(asio::io_context& io, HostPort server, HealthCheckConfig check,
                             std::shared_ptr<const UpstreamTls> tls, Report report,
                             UpstreamProtocol protocol)
    : impl_(std::make_shared<Impl>(io, std::move(server), std::move(check), std::move(tls),
                                   std::move(report), protocol)) {}

HealthChecker::~HealthChecker() {
  stop();
}

void HealthChecker::start() {
  // Posted: the first report never comes from inside start().
  asio::post(impl_->io, [self = impl_] {
    if (!self->stopped) self->run_check();
  });
}

void HealthChecker::stop() {
  impl_->stop();
}

}  // namespace sluice
