#include "middleware/auth/jwks_fetcher.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <spdlog/spdlog.h>

#include "gateway/auth/jwks_source.hpp"
#include "upstream/byte_stream.hpp"
#include "upstream/upstream_tls.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxBody = 1u << 20;
constexpr std::size_t kMaxHead = 16u << 10;
constexpr auto kTick = std::chrono::seconds(1);

constexpr MetricFamily kJwksFamilies[] = {
    {"sluice_auth_jwks_fetches_total", "counter",
     "Fetches of a provider's jwks_url, by provider and result (ok: new keys in use; error: "
     "the keys there were kept)."},
};

// One GET of one JWKS URL, from resolve to the parsed keys.
class Fetch : public std::enable_shared_from_this<Fetch> {
 public:
  // The keys (null on an error, with why), and the document they were read from.
  using Done = std::function<void(std::shared_ptr<const JwkSet>, std::string, std::string)>;

  Fetch(asio::io_context::executor_type executor, JwksSettings settings, Done done)
      : executor_(executor),
        settings_(std::move(settings)),
        done_(std::move(done)),
        resolver_(executor),
        deadline_(executor),
        stream_(ByteStream::socket_type(executor)) {
    parser_.eager(true);
    parser_.header_limit(kMaxHead);
    parser_.body_limit(kMaxBody);
  }

  // Ends the fetch now (the fetcher stops): its handlers find it finished.
  void cancel() { finish(nullptr, "stopped"); }

  void start() {
    deadline_.expires_after(settings_.timeout);
    deadline_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->finish(nullptr, "timed out");
    });
    tls_ = settings_.tls;
    if (settings_.url.tls && !tls_) return finish(nullptr, "TLS: no client context");
    resolver_.async_resolve(settings_.url.host, std::to_string(settings_.url.port),
                            [self = shared_from_this()](error_code ec, tcp::resolver::results_type results) {
                              if (ec) return self->finish(nullptr, "resolve: " + ec.message());
                              self->connect(results);
                            });
  }

 private:
  void connect(const tcp::resolver::results_type& results) {
    asio::async_connect(stream_.socket(), results,
                        [self = shared_from_this()](error_code ec, const tcp::endpoint&) {
                          if (ec) return self->finish(nullptr, "connect: " + ec.message());
                          if (self->tls_) return self->handshake();
                          self->send();
                        });
  }

  void handshake() {
    TlsSocket& session = stream_.use_tls(tls_->context(), tls_, TlsSocket::Role::kClient);
    if (!tls_->prepare(session.native_handle(), settings_.url.host, nullptr)) {
      return finish(nullptr, "TLS: cannot check a certificate against " + settings_.url.host);
    }
    stream_.tls().async_handshake([self = shared_from_this()](error_code ec) {
      if (ec) {
        return self->finish(nullptr, "TLS: " + UpstreamTls::failure_reason(
                                                   self->stream_.tls_session().native_handle(),
                                                   ec.message()));
      }
      self->send();
    });
  }

  void send() {
    const auto& url = settings_.url;
    const bool default_port = url.port == (url.tls ? 443 : 80);
    const bool v6 = url.host.find(':') != std::string::npos;
    std::string host = v6 ? "[" + url.host + "]" : url.host;
    if (!default_port) host += ":" + std::to_string(url.port);
    request_ = "GET " + url.target + " HTTP/1.1\r\nHost: " + host +
               "\r\nUser-Agent: sluice-jwks\r\nAccept: application/json\r\n"
               "Connection: close\r\n\r\n";
    asio::async_write(stream_, asio::buffer(request_),
                      [self = shared_from_this()](error_code ec, std::size_t) {
                        if (ec) return self->finish(nullptr, "send: " + ec.message());
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
        if (parse_ec) return finish(nullptr, "not an HTTP response (" + parse_ec.message() + ")");
        if (step == 0) break;
        used += step;
      }
      pending_.erase(0, used);
      if (pending_.size() > kMaxHead) return finish(nullptr, "a response head over 16 KiB");
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
    finish(nullptr, "the answer was cut short (" + ec.message() + ")");
  }

  void answered() {
    const auto& response = parser_.get();
    if (response.result_int() != 200) {
      return finish(nullptr, "status " + std::to_string(response.result_int()));
    }
    auto keys = parse_jwk_set(response.body());
    if (!keys.set) return finish(nullptr, keys.error);
    finish(std::move(keys.set), {});
  }

  void finish(std::shared_ptr<const JwkSet> keys, std::string error) {
    if (finished_) return;
    finished_ = true;
    deadline_.cancel();
    resolver_.cancel();
    error_code ignored;
    stream_.socket().close(ignored);
    std::string body = keys ? parser_.get().body() : std::string();
    done_(std::move(keys), std::move(error), std::move(body));
  }

  asio::io_context::executor_type executor_;
  JwksSettings settings_;
  Done done_;
  tcp::resolver resolver_;
  asio::steady_timer deadline_;
  ByteStream stream_;
  std::shared_ptr<const UpstreamTls> tls_;
  std::string request_;
  std::string pending_;  // bytes read and not yet taken by the parser
  http::response_parser<http::string_body> parser_;
  std::array<char, 16384> buffer_{};
  bool finished_ = false;
};

}  // namespace

std::span<const MetricFamily> jwks_metric_families() { return kJwksFamilies; }

void seed_jwks_metrics(const Config& config, MetricsShard& metrics) {
  for (const auto& provider : config.auth.jwt) {
    if (!provider.jwks) continue;
    for (const auto result : {"ok", "error"}) {
      metrics.declare("sluice_auth_jwks_fetches_total",
                      scratch_labels({{"provider", provider.name}, {"result", result}}));
    }
  }
}

JwksFetcher::JwksFetcher(asio::io_context::executor_type executor, MetricsShard& metrics)
    : executor_(executor), metrics_(metrics), timer_(executor) {}

void JwksFetcher::configure(const Config& config) {
  watched_.clear();
  for (const auto& provider : config.auth.jwt) {
    if (provider.jwks) watched_.push_back({provider.name, provider.jwks});
  }
  if (!watched_.empty()) tick();  // a new source is fetched at once
}

void JwksFetcher::start() {
  timer_.expires_after(kTick);
  timer_.async_wait([weak = weak_from_this()](error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->closed_) return;
    self->tick();
    self->start();
  });
}

void JwksFetcher::close() {
  closed_ = true;
  timer_.cancel();
  // A fetch in flight ends now: the worker's loop is not held for its timeout.
  for (auto& weak : in_flight_) {
    if (auto fetch = std::static_pointer_cast<Fetch>(weak.lock())) fetch->cancel();
  }
  in_flight_.clear();
}

void JwksFetcher::tick() {
  const auto now = Clock::now();
  for (const auto& watched : watched_) {
    JwksSource& source = *watched.source;
    if (source.in_flight) continue;
    const auto& settings = source.settings();
    const auto since = now - source.last_attempt;
    const bool due = !source.attempted || since >= settings.refresh ||
                     (!source.keys() && since >= settings.min_refresh);
    const bool wanted = since >= settings.min_refresh && source.take_wanted();
    if (due || wanted) fetch(watched);
  }
}

void JwksFetcher::fetch(const Watched& watched) {
  auto source = watched.source;
  source->in_flight = true;
  source->attempted = true;
  source->last_attempt = Clock::now();
  auto fetch = std::make_shared<Fetch>(
      executor_, source->settings(),
      [weak = weak_from_this(), source, provider = watched.provider](
          std::shared_ptr<const JwkSet> keys, std::string error, std::string body) {
        source->in_flight = false;
        auto self = weak.lock();
        if (keys && body == source->last_body) {
          // The same document: the keys in use stay, and so do the tokens verified with them.
        } else if (keys) {
          source->set_keys(std::move(keys));
          source->last_body = std::move(body);
          spdlog::info("jwt: provider {}: keys fetched from {}", provider,
                       source->settings().url.text);
        } else {
          spdlog::warn("jwt: provider {}: cannot fetch {}: {} (the keys there were are kept)",
                       provider, source->settings().url.text, error);
        }
        if (self) {
          self->metrics_.add("sluice_auth_jwks_fetches_total",
                             scratch_labels({{"provider", provider},
                                             {"result", error.empty() ? "ok" : "error"}}));
        }
      });
  std::erase_if(in_flight_, [](const std::weak_ptr<void>& w) { return w.expired(); });
  in_flight_.push_back(fetch);
  fetch->start();
}

}  // namespace sluice
