#include "gateway/front_door.hpp"

#include "gateway/tls/client_certificate.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/context.hpp>

#include "gateway/metrics.hpp"
#include "gateway/session/http1_session.hpp"
#include "gateway/session/http2_session.hpp"
#include "gateway/tls/server_tls.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

IpAddress to_ip(const asio::ip::address& a) {
  IpAddress ip;
  if (a.is_v4()) {
    auto b = a.to_v4().to_bytes();
    ip.bytes[10] = 0xff;
    ip.bytes[11] = 0xff;
    std::copy(b.begin(), b.end(), ip.bytes.begin() + 12);
  } else {
    auto b = a.to_v6().to_bytes();
    std::copy(b.begin(), b.end(), ip.bytes.begin());
  }
  return ip;
}

}  // namespace

FrontDoor::FrontDoor(Worker& worker, WorkerStream::socket_type socket,
                     std::shared_ptr<const ServerTls> tls)
    : worker_(worker),
      stream_(std::move(socket)),
      handshake_timer_(stream_.get_executor()),
      pending_tls_(std::move(tls)) {
  beast::error_code ec;
  auto endpoint = stream_.socket().remote_endpoint(ec);
  peer_ = ec ? IpAddress{} : to_ip(endpoint.address());
  peer_text_ = peer_.to_string();
  stream_.socket().set_option(tcp::no_delay(true), ec);
}

FrontDoor::~FrontDoor() { leave(); }

void FrontDoor::start() {
  if (!pending_tls_) return serve_http1();
  registered_ = true;
  worker_.add_session(this);
  if (worker_.draining()) on_drain();
  if (closed_) return;
  handshake_timer_.expires_after(worker_.config()->server.header_timeout);
  handshake_timer_.async_wait(handler([](FrontDoor& self, beast::error_code ec) {
    if (ec || !self.registered_) return;  // cancelled, or handed over meanwhile
    beast::error_code ignored;
    self.stream_.socket().close(ignored);  // the pending wait or handshake fails
  }));
  waiting_ = true;
  stream_.socket().async_wait(tcp::socket::wait_read,
                              handler([](FrontDoor& self, beast::error_code ec) {
                                self.waiting_ = false;
                                if (self.closed_) return;  // closed by a drain
                                if (!ec) return self.start_tls();
                                self.worker_.metrics().add("sluice_tls_handshakes_total",
                                                           label("result", "error"));
                                self.close();
                              }));
}

void FrontDoor::start_tls() {
  SSL_CTX* context = pending_tls_->context().native_handle();
  stream_.use_tls(context, std::move(pending_tls_));
  stream_.tls().async_handshake(
      handler([](FrontDoor& self, beast::error_code ec) { self.on_handshake(ec); }));
}

void FrontDoor::on_handshake(beast::error_code ec) {
  handshake_timer_.cancel();
  worker_.metrics().add("sluice_tls_handshakes_total", label("result", ec ? "error" : "ok"));
  if (ec || closed_) return close();
  client_cert_ = verified_client_certificate(stream_.tls_session().native_handle());
  if (alpn_h2()) return serve_http2({}, draining_);
  serve_http1();
}

bool FrontDoor::alpn_h2() {
  const unsigned char* protocol = nullptr;
  unsigned int length = 0;
  SSL_get0_alpn_selected(stream_.tls_session().native_handle(), &protocol, &length);
  return length == 2 && protocol[0] == 'h' && protocol[1] == '2';
}

void FrontDoor::serve_http1() {
  leave();
  auto session = std::make_shared<Http1Session>(worker_, shared_from_this());
  if (worker_.draining() || draining_) session->on_drain();
  session->start();
}

void FrontDoor::serve_http2(std::string_view received, bool draining) {
  leave();
  auto h2 = std::make_shared<Http2Session>(worker_, stream_, shared_from_this(), peer_, peer_text_);
  h2->set_client_cert(client_cert_.get());
  try {
    h2->start(received);
    if (draining || draining_) h2->on_drain();
  } catch (const std::exception& e) {
    h2->on_internal_error(e.what());
  }
}

void FrontDoor::leave() {
  if (!registered_) return;
  registered_ = false;
  worker_.remove_session(this);
}

// Only a connection with no byte of a request yet is closed now; one shaking
// hands is told of the drain when it is handed over.
void FrontDoor::on_drain() {
  if (!registered_) return;
  draining_ = true;
  if (waiting_) force_close();
}

void FrontDoor::force_close() {
  if (!registered_) return;
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  close();
}

void FrontDoor::on_internal_error(std::string_view what) noexcept {
  if (closed_ || !registered_) return;
  try {
    spdlog::error("client {}: internal error, closing the connection: {}", peer_text_, what);
    worker_.metrics().add("sluice_internal_errors_total", "");
  } catch (...) {
    // Logging failed too; closing is all that is left.
  }
  close();
}

void FrontDoor::close() {
  closed_ = true;
  handshake_timer_.cancel();
  beast::error_code ec;
  stream_.socket().close(ec);
  leave();
}

void start_client_session(Worker& worker, WorkerSocket socket,
                          std::shared_ptr<const ServerTls> tls) {
  std::make_shared<FrontDoor>(worker, std::move(socket), std::move(tls))->start();
}

}  // namespace sluice
