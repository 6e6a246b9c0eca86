// The connection as its request object's leg: watching the client while a
// middleware step is pending or the response is awaited, what the request
// asks of the connection when its exchange ends, and the WebSocket tunnel.
#include "gateway/session/http1_session.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <utility>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "gateway/metrics.hpp"
#include "gateway/session/client_read_error.hpp"
#include "gateway/session/exchange_log.hpp"
#include "gateway/session/local_reply.hpp"
#include "gateway/session/request_path.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

}  // namespace

// ---- Watching the client while a step is pending ---------------------------------

void Http1Session::await_client() {
  watch_.wait_generation = watch_.generation;
  if (watch_.pending) return;  // an ended watch's wait, still on the socket, serves this one
  watch_.pending = true;
  stream_.socket().async_wait(
      tcp::socket::wait_read,
      handler([wait_id = ++watch_.wait_id](Http1Session& self, beast::error_code ec) {
        self.on_client_readable(ec, wait_id);
      }));
}

void Http1Session::on_client_readable(beast::error_code ec, std::uint64_t wait_id) {
  if (wait_id != watch_.wait_id) return;  // a wait cancelled and replaced since (TLS)
  watch_.pending = false;
  if (std::exchange(watch_.next_request, false)) return on_next_request_readable(ec);
  if (watch_.wait_generation != watch_.generation) return;  // a watch that ended
  if (!request_.watched()) return;
  bool gone = closed_;  // closed by the session itself (drain deadline, internal error)
  // A socket closed without closed_ (a deadline) is gone: OpenSSL must not
  // touch a descriptor number another connection may hold by now.
  if (!gone && !ec && !stream_.socket().is_open()) gone = true;
  if (!gone && !ec && stream_.is_tls()) {
    // Over TLS a goodbye (close_notify) is a record like any other: OpenSSL
    // reads what came and keeps any data for the request's next read.
    const auto peeked = stream_.tls_session().attempt_peek();
    if (peeked.bytes > 0 || peeked.want == TlsSocket::Want::kWrite) return;
    if (peeked.want == TlsSocket::Want::kRead) return await_client();
    gone = true;  // close_notify, end of stream or an error
  } else if (!gone && !ec) {
    char byte;
    const auto n = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    // A body or the next request: the request goes on, unwatched; a close of
    // the connection still tells the step (ProxiedRequest::client_gone).
    if (n > 0) return;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return await_client();
    // End of stream (a close or a half-close: as nginx, a client that stopped
    // sending is taken to have left) or a hard error (a reset).
    gone = true;
  }
  if (ec && !gone && ec != asio::error::operation_aborted) gone = true;
  if (!gone) return;
  if (closed_) return request_.client_gone();
  // Closed before the step hears of it: a step that completes inside
  // client_gone() (a delayed request's wait) has its outcome dropped rather
  // than sent upstream for a client that left.
  closed_ = true;
  request_.client_gone();
  request_.abort(request_.exchange().upstream_status(), CutReason::kInternal);
}

// While the upstream has not answered, a client that closes, half-closes or
// resets its connection aborts the exchange at once (on_client_readable): the
// upstream request is cancelled (its connection dropped, an HTTP/2 stream
// reset), the exchange logged 499, and what the request held (a concurrency
// slot) given back. A route that ignores client aborts lets the upstream
// finish; a client that left is then noticed when the response is written.
void Http1Session::awaiting_response(bool waiting) {
  if (!waiting) {
    if (!watch_.response_wait) return;
    watch_.response_wait = false;
    return request_.stop_watch();
  }
  if (closed_ || watch_.watching() || watch_.response_wait) return;
  const RequestInfo& info = request_.info();
  if (info.route && info.route->ignore_client_abort) return;
  // A pipelined request already read: the client is there, even if it has
  // shut its sending side since (nc -N after its requests).
  if (buffer_.size() > 0) return;
  watch_.response_wait = true;
  // Nothing to tell: the abort is on_client_readable's own.
  request_.watch_client([] {});
}

// The watched step completed (the request forgot its watch): the watch ends.
// On plain TCP its wait stays for the next watch or the kept-alive wait;
// over TLS (OpenSSL may hold read data the socket no longer shows) it is
// cancelled.
void Http1Session::stop_watching() {
  ++watch_.generation;
  if (!watch_.pending || closed_ || !stream_.is_tls()) return;
  watch_.pending = false;
  beast::error_code ignored;
  stream_.socket().cancel(ignored);
}

// ---- The request object's leg ----------------------------------------------------

std::string_view Http1Session::protocol() const {
  return parser_->get().version() == 10 ? "HTTP/1.0" : "HTTP/1.1";
}

std::optional<std::uint64_t> Http1Session::declared_length() const {
  return to_std(parser_->content_length());
}

void Http1Session::relayed(bool keep) {
  reset_exchange();
  if (!keep) return graceful_close();
  do_read_head();
}

void Http1Session::cut(CutReason) {
  request_.exchange().drop_upstream();
  close();
}

// A body read that failed after the client's deadline passed, unless the body
// was too large (a 413 says more than a 408).
bool Http1Session::body_timed_out(beast::error_code ec) const {
  return client_timed_out_ && client_read_error(ec, ReadPhase::kBody).status != 413;
}

// ---- A WebSocket tunnel ---------------------------------------------------------

void Http1Session::tunnel_opened() {
  deadline_.clear();  // the tunnel keeps its own idle timeout
  in_tunnel_ = true;
  worker_.tunnels_changed(1);
}

void Http1Session::tunnel_ended(bool graceful) {
  in_tunnel_ = false;
  worker_.tunnels_changed(-1);
  if (closed_) return;
  if (graceful) return graceful_close();
  close();
}

}  // namespace sluice
