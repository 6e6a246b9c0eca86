#include "gateway/mirror/mirror_request.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "gateway/metrics.hpp"
#include "gateway/worker.hpp"
#include "upstream/exchange/upstream_exchange.hpp"
#include "upstream/request_head.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;

constexpr std::size_t kMirrorRelayBytes = 16 * 1024;

// `from`'s views copied into `storage` (one allocation), `to` pointing there.
void copy_head(const UpstreamHead& from, std::string& storage, UpstreamHead& to) {
  std::size_t total = from.method.size() + from.target.size();
  for (const auto& [name, value] : from.fields) total += name.size() + value.size();
  storage.clear();
  storage.reserve(total);  // no reallocation below: the views stay valid
  const auto keep = [&storage](std::string_view s) {
    const std::size_t at = storage.size();
    storage.append(s);
    return std::string_view(storage).substr(at, s.size());
  };
  to.method = keep(from.method);
  to.target = keep(from.target);
  to.fields.clear();
  for (const auto& [name, value] : from.fields) to.fields.emplace_back(keep(name), keep(value));
  to.has_host = from.has_host;
  to.host_at = from.host_at;
  to.chunked = from.chunked;
  to.content_length = from.content_length;
}

class MirrorRequest final : public ExchangeHost,
                            public ClientLeg,
                            public MirrorCopyHandle,
                            public std::enable_shared_from_this<MirrorRequest> {
 public:
  MirrorRequest(Worker& worker, std::shared_ptr<const Config> config, const RouteConfig& route,
                const MirrorCopy& copy)
      : worker_(worker),
        config_(std::move(config)),
        route_(route),
        upstream_(config_->upstreams[route.mirror->upstream_index]),
        body_(copy.body),
        relay_(std::make_unique<char[]>(kMirrorRelayBytes)),
        timer_(worker.io()),
        exchange_(*this, *this, worker.pools().executor(), worker.pools()) {
    copy_head(*copy.head, head_text_, head_);
    chunked_ = copy.chunked;
  }

  void start() {
    if (worker_.draining()) {
      // The drain began after the copy was made: it is not sent.
      count_mirror(worker_, route_.name, "skipped");
      return;
    }
    ExchangeRequest request;
    request.upstream = &upstream_;
    request.head = &head_;
    request.relay = {relay_.get(), kMirrorRelayBytes};
    request.method = boost::beast::http::string_to_verb(head_.method);
    request.send_timeout = config_->server.send_timeout;
    request.chunked = chunked_;
    request.body_empty = body_.empty() && !chunked_;
    // The route's timeouts bound a copy as they bound the real request.
    request.deadline = route_.timeouts.total;
    request.response_timeout = route_.timeouts.idle;
    request.counts_for_servers = false;
    worker_.mirrors().add(this);
    auto self = shared_from_this();
    exchange_.start(request, std::shared_ptr<UpstreamExchange>(self, &exchange_));
  }

  // ---- ExchangeHost ----
  void set_deadline(Side, std::chrono::steady_clock::duration timeout) override {
    timer_.expires_after(timeout);
    // A wait that had fired already, its handler queued, is not this one's.
    timer_.async_wait([weak = weak_from_this(), generation = ++timer_generation_](
                          beast::error_code ec) {
      auto self = weak.lock();
      if (self && !ec && !self->ended_ && generation == self->timer_generation_) {
        self->exchange_.on_upstream_deadline();
      }
    });
  }
  bool draining() const override { return false; }
  // A cut copy is as a request whose client left: whatever it waits for ends it.
  bool client_closed() const override { return cut_; }
  void exchange_ended(const ExchangeResult& result) override {
    ended_ = true;
    timer_.cancel();
    const bool answered = result.status != 0;
    count_mirror(worker_, route_.name, answered ? "answered" : "failed");
    // The exchange's own state goes after this call has returned.
    asio::post(worker_.io(), [self = shared_from_this()] { self->exchange_.reset(); });
  }
  void tunnel_opened() override {}
  void tunnel_relayed(TunnelDirection, std::size_t) override {}
  void tunnel_ended(bool) override {}
  void on_internal_error(std::string_view what) noexcept override {
    spdlog::warn("mirror of route {}: {}", route_.name, what);
    worker_.metrics().add("sluice_internal_errors_total", "");
    if (!ended_) exchange_.close_upstream_socket();  // what is pending fails and ends it
  }

  // ---- ClientLeg: the copy as the body source, a sink that drops the answer ----
  bool body_done() const override { return at_ == body_.size() && !end_owed(); }
  bool body_at_hand() const override { return true; }
  bool expects_continue() const override { return false; }
  void send_continue() override {
    post([](MirrorRequest& self) { self.exchange_.on_continue_sent({}); });
  }
  void read_body(std::span<char> into) override {
    const std::size_t n = std::min(into.size(), body_.size() - at_);
    std::memcpy(into.data(), body_.data() + at_, n);
    at_ += n;
    ended_body_ = at_ == body_.size();
    post([n](MirrorRequest& self) { self.exchange_.on_body_read({}, n); });
  }
  void start_response(const ResponseStart&) override {}
  void send_response(const char*, std::size_t, bool) override {
    post([](MirrorRequest& self) { self.exchange_.on_response_sent({}); });
  }
  bool keeps_client() const override { return false; }

  void cut() override {
    if (ended_ || cut_) return;
    cut_ = true;
    exchange_.cancel_wait();
    exchange_.close_upstream_socket();
  }

  ~MirrorRequest() override {
    worker_.mirrors().remove(this);
    worker_.mirrors().release(route_.name);
  }

 private:
  // A chunked body, even an empty one, ends with a read (its last chunk).
  bool end_owed() const { return chunked_ && !ended_body_; }

  template <class Fn>
  void post(Fn fn) {
    asio::post(worker_.io(), [self = shared_from_this(), fn = std::move(fn)]() mutable {
      try {
        fn(*self);
      } catch (const std::exception& e) {
        self->on_internal_error(e.what());
      }
    });
  }

  Worker& worker_;
  std::shared_ptr<const Config> config_;  // keeps the route and the upstream
  const RouteConfig& route_;
  const UpstreamConfig& upstream_;
  std::string body_;
  std::string head_text_;
  UpstreamHead head_;
  std::unique_ptr<char[]> relay_;
  asio::steady_timer timer_;
  UpstreamExchange exchange_;
  std::size_t at_ = 0;
  bool chunked_ = false;
  bool ended_body_ = false;
  bool ended_ = false;
  bool cut_ = false;
  std::uint64_t timer_generation_ = 0;
};

}  // namespace

void count_mirror(Worker& worker, std::string_view route, std::string_view outcome) {
  worker.metrics().add("sluice_mirror_requests_total",
                       scratch_labels({{"route", route}, {"outcome", outcome}}));
}

void send_mirror(Worker& worker, std::shared_ptr<const Config> config, const RouteConfig& route,
                 const MirrorCopy& copy) {
  std::shared_ptr<MirrorRequest> mirror;
  try {
    mirror = std::make_shared<MirrorRequest>(worker, std::move(config), route, copy);
  } catch (const std::exception& e) {
    // Not made: the slot it was to hold goes back; the real request goes on.
    spdlog::warn("mirror of route {}: {}", route.name, e.what());
    worker.mirrors().release(route.name);
    count_mirror(worker, route.name, "failed");
    return;
  }
  // Started after the real request's end has run its course.
  asio::post(worker.io(), [mirror = std::move(mirror)] {
    try {
      mirror->start();
    } catch (const std::exception& e) {
      mirror->on_internal_error(e.what());
    }
  });
}

}  // namespace sluice
