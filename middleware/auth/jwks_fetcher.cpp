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
  using Done = std::function<void(std::shared_ptr<const JwkSet>, std::string)>;

  Fetch(asio::io_context::executor_type executor, JwksSettings settings, Done done)
      : executor_(executor),
        settings_(std::move(settings)),
        done_(std::move(done)),
        resolver_(executor),
        deadline_(executor),
        stream_(ByteStream::socket_type(executor)) {}

  void start() {
    deadline_.expires_after(settings_.timeout);
    deadline_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->finish(nullptr, "timed out");
    });
    if (settings_.url.tls) {
      std::string error;
      UpstreamTlsConfig config;
      config.ca_file = settings_.ca_file;
      tls_ = UpstreamTls::build(config, error);
      if (!tls_) return finish(nullptr, "TLS: " + error);
    }
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

  void on_read(error_code ec, std::size_t n) {
    received_.append(buffer_.data(), n);
    if (received_.size() > kMaxBody + kMaxHead) return finish(nullptr, "larger than 1 MiB");
    if (!ec) return read();
    // The whole answer is in (the server closed, as asked): parse it.
    http::response_parser<http::string_body> parser;
    parser.eager(true);
    parser.header_limit(kMaxHead);
    parser.body_limit(kMaxBody);
    error_code parse_ec;
    std::size_t used = 0;
    while (used < received_.size() && !parser.is_done()) {
      const std::size_t step = parser.put(
          asio::buffer(received_.data() + used, received_.size() - used), parse_ec);
      if (parse_ec || step == 0) break;
      used += step;
    }
    if (!parser.is_done() && !parse_ec) parser.put_eof(parse_ec);
    if (parse_ec || !parser.is_done()) {
      return finish(nullptr, "not an HTTP response (" +
                                 (parse_ec ? parse_ec.message() : std::string("cut short")) + ")");
    }
    const auto& response = parser.get();
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
    done_(std::move(keys), std::move(error));
  }

  asio::io_context::executor_type executor_;
  JwksSettings settings_;
  Done done_;
  tcp::resolver resolver_;
  asio::steady_timer deadline_;
  ByteStream stream_;
  std::shared_ptr<const UpstreamTls> tls_;
  std::string request_;
  std::string received_;
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
          std::shared_ptr<const JwkSet> keys, std::string error) {
        source->in_flight = false;
        auto self = weak.lock();
        if (keys) {
          source->set_keys(std::move(keys));
          spdlog::info("jwt: provider {}: keys fetched from {}", provider,
                       source->settings().url.text);
        } else {
          spdlog::warn("jwt: provider {}: cannot fetch {}: {} (the keys there were are kept)",
                       provider, source->settings().url.text, error);
        }
        if (self) {
          self->metrics_.add("sluice_auth_jwks_fetches_total",
                             scratch_labels({{"provider", provider},
                                             {"result", keys || error.empty() ? "ok" : "error"}}));
        }
      });
  fetch->start();
}

}  // namespace sluice
