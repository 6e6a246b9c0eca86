#include "upstream/http/http_call.hpp"

#include <array>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>

#include "upstream/byte_stream.hpp"
#include "upstream/upstream_tls.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

constexpr std::size_t kMaxHead = 16u << 10;

class Call final : public HttpCall, public std::enable_shared_from_this<Call> {
 public:
  Call(asio::io_context::executor_type executor, HttpCallSpec spec, Done done)
      : spec_(std::move(spec)),
        done_(std::move(done)),
        resolver_(executor),
        deadline_(executor),
        stream_(ByteStream::socket_type(executor)) {
    parser_.eager(true);
    parser_.header_limit(kMaxHead);
    parser_.body_limit(spec_.max_body);
  }

  void cancel() override { fail("stopped"); }

  void start() {
    deadline_.expires_after(spec_.timeout);
    deadline_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->fail("timed out");
    });
    if (spec_.url.tls && !spec_.tls) return fail("TLS: no client context");
    resolver_.async_resolve(
        spec_.url.host, std::to_string(spec_.url.port),
        [self = shared_from_this()](error_code ec, tcp::resolver::results_type results) {
          if (ec) return self->fail("resolve: " + ec.message());
          self->connect(results);
        });
  }

 private:
  void connect(const tcp::resolver::results_type& results) {
    asio::async_connect(stream_.socket(), results,
                        [self = shared_from_this()](error_code ec, const tcp::endpoint&) {
                          if (ec) return self->fail("connect: " + ec.message());
                          if (self->spec_.url.tls) return self->handshake();
                          self->send();
                        });
  }

  void handshake() {
    const auto& tls = spec_.tls;
    TlsSocket& session = stream_.use_tls(tls->context(), tls, TlsSocket::Role::kClient);
    if (!tls->prepare(session.native_handle(), spec_.url.host, nullptr)) {
      return fail("TLS: cannot check a certificate against " + spec_.url.host);
    }
    stream_.tls().async_handshake([self = shared_from_this()](error_code ec) {
      if (ec) {
        return self->fail("TLS: " + UpstreamTls::failure_reason(
                                        self->stream_.tls_session().native_handle(),
                                        ec.message()));
      }
      self->send();
    });
  }

  void send() {
    const auto& url = spec_.url;
    const bool default_port = url.port == (url.tls ? 443 : 80);
    const bool v6 = url.host.find(':') != std::string::npos;
    std::string host = v6 ? "[" + url.host + "]" : url.host;
    if (!default_port) host += ":" + std::to_string(url.port);
    request_ = spec_.method + " " + url.target + " HTTP/1.1\r\nHost: " + host +
               "\r\nUser-Agent: " + spec_.user_agent + "\r\n";
    for (const auto& [name, value] : spec_.headers) request_ += name + ": " + value + "\r\n";
    const std::string& body = spec_.shared_body ? *spec_.shared_body : spec_.body;
    if (!body.empty() || spec_.method != "GET") {
      request_ += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    }
    request_ += "Connection: close\r\n\r\n";
    const std::array<asio::const_buffer, 2> buffers{asio::buffer(request_), asio::buffer(body)};
    asio::async_write(stream_, buffers, [self = shared_from_this()](error_code ec, std::size_t) {
      if (ec) return self->fail("send: " + ec.message());
      self->read();
    });
  }

  void read() {
    stream_.async_read_some(asio::buffer(buffer_),
                            [self = shared_from_this()](error_code ec, std::size_t n) {
                              self->on_read(ec, n);
                            });
  }

  // The answer is parsed as it comes: a server that keeps the connection
  // open after it is complete is not waited for.
  void on_read(error_code ec, std::size_t n) {
    if (finished_) return;
    if (n > 0) {
      error_code parse_ec;
      std::size_t used = 0;
      pending_.append(buffer_.data(), n);
      while (used < pending_.size() && !parser_.is_done()) {
        const std::size_t step =
            parser_.put(asio::buffer(pending_.data() + used, pending_.size() - used), parse_ec);
        if (parse_ec == http::error::need_more) {
          parse_ec = {};
          break;
        }
        if (parse_ec) return fail("not an HTTP response (" + parse_ec.message() + ")");
        if (step == 0) break;
        used += step;
      }
      pending_.erase(0, used);
      if (pending_.size() > kMaxHead) return fail("a response head over 16 KiB");
    }
    if (parser_.is_done()) return answered();
    if (!ec) return read();
    // The server closed before the answer was complete: complete only if it
    // ends at the close (no length given).
    if (ec == asio::error::eof && parser_.is_header_done()) {
      error_code eof_ec;
      parser_.put_eof(eof_ec);
      if (!eof_ec && parser_.is_done()) return answered();
    }
    fail("the answer was cut short (" + ec.message() + ")");
  }

  void answered() {
    auto& response = parser_.get();
    HttpCallResult result;
    result.status = response.result_int();
    if (auto it = response.find(http::field::retry_after); it != response.end()) {
      result.retry_after = std::string(it->value());
    }
    result.body = std::move(response.body());
    finish(std::move(result));
  }

  void fail(std::string error) {
    HttpCallResult result;
    result.error = std::move(error);
    finish(std::move(result));
  }

  void finish(HttpCallResult result) {
    if (finished_) return;
    finished_ = true;
    deadline_.cancel();
    resolver_.cancel();
    error_code ignored;
    stream_.socket().close(ignored);
    Done done = std::move(done_);
    done(std::move(result));
  }

  HttpCallSpec spec_;
  Done done_;
  tcp::resolver resolver_;
  asio::steady_timer deadline_;
  ByteStream stream_;
  std::string request_;
  std::string pending_;  // bytes read and not yet taken by the parser
  http::response_parser<http::string_body> parser_;
  std::array<char, 16384> buffer_{};
  bool finished_ = false;
};

}  // namespace

std::optional<HttpUrl> parse_http_url(std::string_view text, std::string& error) {
  const auto parsed = boost::urls::parse_absolute_uri(text);
  if (!parsed) {
    error = "not a URL";
    return std::nullopt;
  }
  const boost::urls::url_view& url = *parsed;
  HttpUrl out;
  out.text = std::string(text);
  if (url.scheme() == "https") {
    out.tls = true;
    out.port = 443;
  } else if (url.scheme() == "http") {
    out.tls = false;
    out.port = 80;
  } else {
    error = "the scheme must be https or http";
    return std::nullopt;
  }
  if (url.has_userinfo() || url.has_fragment()) {
    error = "no user information or fragment";
    return std::nullopt;
  }
  out.host = std::string(url.encoded_host_address());
  if (out.host.size() > 2 && out.host.front() == '[' && out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  }
  if (out.host.empty()) {
    error = "no host";
    return std::nullopt;
  }
  if (url.has_port()) {
    const auto port = url.port_number();
    if (port == 0) {
      error = "invalid port";
      return std::nullopt;
    }
    out.port = port;
  }
  out.target = url.encoded_path().empty() ? "/" : std::string(url.encoded_path());
  if (url.has_query()) out.target += "?" + std::string(url.encoded_query());
  return out;
}

std::shared_ptr<HttpCall> start_http_call(asio::io_context::executor_type executor,
                                          HttpCallSpec spec, HttpCall::Done done) {
  auto call = std::make_shared<Call>(executor, std::move(spec), std::move(done));
  call->start();
  return call;
}

}  // namespace sluice
