#include "gateway/admin/admin_server.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <list>
#include <optional>
#include <string>

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
constexpr std::size_t kAdminHeaderLimit = 8192;
// A request body (a consumer's JSON) larger than this gets 413.
constexpr std::size_t kAdminBodyLimit = 1024 * 1024;
using Clock = std::chrono::steady_clock;

}  // namespace

class AdminSession;

// Every session registers itself here for its life. A session reading (or
// waiting for) a request head has a `waiting_since`; one busy with a request
// (its handler, its reply) has none and is never closed to make room.
class AdminServer::Sessions {
 public:
  struct Entry {
    AdminSession* session;
    std::optional<Clock::time_point> waiting_since;
    bool closing = false;  // closed to make room; gone once its handlers end
  };

  std::list<Entry>::iterator add(AdminSession* session) {
    return entries_.insert(entries_.end(), Entry{session, Clock::now()});
  }
  void remove(std::list<Entry>::iterator entry) { entries_.erase(entry); }

  // Sessions that are not closing.
  std::size_t open() const {
    return static_cast<std::size_t>(
        std::count_if(entries_.begin(), entries_.end(), [](const Entry& e) { return !e.closing; }));
  }
  // The session that has waited longest for a request, or null when every
  // open one is busy.
  Entry* longest_waiting() {
    Entry* oldest = nullptr;
    for (auto& e : entries_) {
      if (e.closing || !e.waiting_since) continue;
      if (!oldest || *e.waiting_since < *oldest->waiting_since) oldest = &e;
    }
    return oldest;
  }

 private:
  std::list<Entry> entries_;
};

// One admin connection (declared here, outside an anonymous namespace, so
// that the server's table can name it).
class AdminSession : public std::enable_shared_from_this<AdminSession> {
 public:
  using Sessions = AdminServer::Sessions;

  AdminSession(const AdminRoutes& routes, std::shared_ptr<Sessions> sessions, tcp::socket socket)
      : routes_(routes), sessions_(std::move(sessions)), stream_(std::move(socket)) {
    entry_ = sessions_->add(this);
    beast::error_code ec;
    const auto peer = stream_.socket().remote_endpoint(ec);
    if (!ec) peer_ = peer.address().to_string();
    const auto local = stream_.socket().local_endpoint(ec);
    if (!ec) local_ = local.address().to_string();
  }
  ~AdminSession() { sessions_->remove(entry_); }

  void start() { do_read(); }

  // Closed to make room for a new connection: the pending read ends.
  void evict() {
    entry_->closing = true;
    close();
  }

 private:
  void do_read() {
    req_ = {};
    parser_.emplace();
    // What a large body grew is given back between requests.
    if (buffer_.capacity() > kAdminHeaderLimit) buffer_.shrink_to_fit();
    parser_->header_limit(kAdminHeaderLimit);
    // Set once the head tells which endpoint the body is for (on_header).
    parser_->body_limit(boost::none);
    entry_->waiting_since = Clock::now();
    stream_.expires_after(requests_ == 0 ? AdminServer::kFirstRequestTimeout
                                         : AdminServer::kIdleTimeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  // The head is in. A request the routes refuse by its head (no token, a
  // browser's) is answered before any byte of its body is read, and the
  // connection then closes. Else a streaming endpoint gets the body piece by
  // piece, and any other request is read whole (within kAdminBodyLimit) first.
  void on_header(beast::error_code ec) {
    if (ec || entry_->closing) return close();
    if (auto refusal = routes_.refuse({parser_->get(), peer_, local_})) {
      entry_->waiting_since.reset();
      ++requests_;
      req_ = parser_->get();  // the head: HEAD is answered by it
      // Closed after the answer, body or no body (docs/security.md).
      req_.keep_alive(false);
      return write(std::move(*refusal));
    }
    if (!routes_.streams(parser_->get())) {
      const auto length = parser_->content_length();
      if (length && *length > kAdminBodyLimit) return too_large();
      parser_->body_limit(kAdminBodyLimit);  // a chunked body is counted as it comes
      stream_.expires_after(kAdminTimeout);
      return http::async_read(
          stream_, buffer_, *parser_,
          [self = shared_from_this()](beast::error_code e, std::size_t) { self->on_read(e); });
    }
    entry_->waiting_since.reset();
    ++requests_;
    parser_->body_limit(boost::none);
    req_ = parser_->get();  // the head (its body is empty yet)
    routes_.dispatch_stream({req_, peer_, local_}, std::make_shared<BodyReader>(shared_from_this()),
                            reply_from_here());
  }

  // What a streaming endpoint reads the body with: one piece per call, and
  // none held here afterwards.
  class BodyReader final : public AdminBodyReader {
   public:
    explicit BodyReader(std::shared_ptr<AdminSession> session) : session_(std::move(session)) {}
    void read(Piece piece) override {
      auto& s = *session_;
      if (s.parser_->is_done()) {
        return asio::post(s.stream_.get_executor(),
                          [piece = std::move(piece)] { piece({}, {}, true); });
      }
      s.stream_.expires_after(kAdminTimeout);
      http::async_read_some(
          s.stream_, s.buffer_, *s.parser_,
          [session = session_, piece = std::move(piece)](beast::error_code ec, std::size_t) {
            std::string bytes = std::move(session->parser_->get().body());
            session->parser_->get().body().clear();
            piece(ec, std::move(bytes), !ec && session->parser_->is_done());
          });
    }
    boost::asio::any_io_executor executor() const override {
      return session_->stream_.get_executor();
    }

   private:
    std::shared_ptr<AdminSession> session_;
  };

  void on_read(beast::error_code ec) {
    if (ec == http::error::body_limit && !entry_->closing) return too_large();
    if (ec || entry_->closing) return close();
    entry_->waiting_since.reset();
    ++requests_;
    req_ = parser_->release();
    routes_.dispatch({req_, peer_, local_}, reply_from_here());
  }

  // 413, then the connection closes: the rest of the body is never read.
  void too_large() {
    entry_->waiting_since.reset();
    req_ = {};
    req_.keep_alive(false);
    write(admin_response(http::status::payload_too_large, "application/problem+json",
                         R"({"type":"about:blank","title":"Content Too Large",)"
                         R"("status":413,"detail":"the body is larger than 1 MiB"})"
                         "\n"));
  }

  // A handler may answer from another thread (a worker): the write is
  // posted back to this session's executor, and the reply hands its hold on
  // the session over to that post, so that the session is never released on
  // the other thread.
  AdminReply reply_from_here() {
    return [self = shared_from_this()](AdminResponse res) mutable {
      auto executor = self->stream_.get_executor();
      asio::post(executor, [self = std::move(self), res = std::move(res)]() mutable {
        self->write(std::move(res));
      });
    };
  }

  void write(AdminResponse res) {
    res_ = std::move(res);
    // A body left unread (a streaming request answered early) ends the connection.
    res_.keep_alive(req_.keep_alive() && (!parser_ || parser_->is_done()));
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
  std::shared_ptr<Sessions> sessions_;
  std::string peer_;   // the client's address, as endpoints log it
  std::string local_;  // the address the connection arrived on
  std::list<Sessions::Entry>::iterator entry_;
  std::uint64_t requests_ = 0;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  AdminRequest req_;
  AdminResponse res_;
};

AdminServer::AdminServer(asio::io_context& io, const AdminRoutes& routes, MetricsShard& metrics)
    : routes_(routes),
      metrics_(metrics),
      acceptor_(io),
      backoff_(io, "admin"),
      sessions_(std::make_shared<Sessions>()) {}

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
    // At the cap, the connection that has waited longest for a request makes
    // room; when every one is busy with a request, the new one is refused.
    if (sessions_->open() >= kMaxConnections) {
      if (auto* waiting = sessions_->longest_waiting()) {
        waiting->session->evict();
        metrics_.add("sluice_admin_connections_shed_total", "");
      } else {
        beast::error_code ignored;
        socket.close(ignored);
        do_accept();
        return;
      }
    }
    std::make_shared<AdminSession>(routes_, sessions_, std::move(socket))->start();
    do_accept();
  });
}

}  // namespace sluice
