#include "gateway/admin/admin_server.hpp"

#include <chrono>
#include <optional>

#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr auto kAdminTimeout = std::chrono::seconds(30);
constexpr std::size_t kAdminMessageLimit = 8192;

class AdminSession : public std::enable_shared_from_this<AdminSession> {
 public:
  AdminSession(const AdminRoutes& routes, std::shared_ptr<std::size_t> open, tcp::socket socket)
      : routes_(routes), open_(std::move(open)), stream_(std::move(socket)) {
    ++*open_;
  }
  ~AdminSession() { --*open_; }

  void start() { do_read(); }

 private:
  void do_read() {
    req_ = {};
    parser_.emplace();
    parser_->header_limit(kAdminMessageLimit);
    parser_->body_limit(kAdminMessageLimit);
    stream_.expires_after(kAdminTimeout);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec) return close();
    req_ = parser_->release();
    // A handler may answer from another thread (a worker): the write is
    // posted back to this session's executor, and the reply hands its hold
    // on the session over to that post, so that the session is never
    // released on the other thread.
    routes_.dispatch(req_, [self = shared_from_this()](AdminResponse res) mutable {
      auto executor = self->stream_.get_executor();
      asio::post(executor, [self = std::move(self), res = std::move(res)]() mutable {
        self->write(std::move(res));
      });
    });
  }

  void write(AdminResponse res) {
    res_ = std::move(res);
    res_.keep_alive(req_.keep_alive());
    res_.prepare_payload();
    if (req_.method() == http::verb::head) {
      // The head of what GET would send, without the body.
      const auto length = res_.body().size();
      res_.body().clear();
      res_.content_length(length);
    }
    stream_.expires_after(kAdminTimeout);
    http::async_write(stream_, res_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (ec || !self->res_.keep_alive()) return self->close();
                        self->do_read();
                      });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  const AdminRoutes& routes_;
  std::shared_ptr<std::size_t> open_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  AdminRequest req_;
  AdminResponse res_;
};

}  // namespace

AdminServer::AdminServer(asio::io_context& io, const AdminRoutes& routes, MetricsShard& metrics)
    : routes_(routes), metrics_(metrics), acceptor_(io), backoff_(io, "admin") {}

bool AdminServer::bind(const HostPort& where) {
  return bind_acceptor(acceptor_, where, "admin.listen");
}

void AdminServer::start() {
  do_accept();
}

void AdminServer::close() {
  beast::error_code ec;
  acceptor_.close(ec);
  backoff_.cancel();
}

void AdminServer::do_accept() {
  acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) return backoff_.failed(ec, metrics_, [this] { do_accept(); });
    backoff_.succeeded();
    if (*open_sessions_ >= kMaxConnections) {
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      std::make_shared<AdminSession>(routes_, open_sessions_, std::move(socket))->start();
    }
    do_accept();
  });
}

}  // namespace sluice
