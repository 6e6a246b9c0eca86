#include "middleware/auth/jwks_fetcher.hpp"

#include <spdlog/spdlog.h>

#include "gateway/auth/jwks_source.hpp"
#include "upstream/http/http_call.hpp"

namespace sluice {
namespace {

namespace asio = boost::asio;
using error_code = boost::system::error_code;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxBody = 1u << 20;
constexpr auto kTick = std::chrono::seconds(1);

constexpr MetricFamily kJwksFamilies[] = {
    {"sluice_auth_jwks_fetches_total", "counter",
     "Fetches of a provider's jwks_url, by provider and result (ok: new keys in use; error: "
     "the keys there were kept)."},
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
    if (auto call = weak.lock()) call->cancel();
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
  const JwksSettings& settings = source->settings();
  HttpCallSpec spec;
  spec.url = settings.url;
  spec.tls = settings.tls;
  spec.user_agent = "sluice-jwks";
  spec.headers = {{"Accept", "application/json"}};
  spec.timeout = settings.timeout;
  spec.max_body = kMaxBody;
  auto call = start_http_call(
      executor_, std::move(spec),
      [weak = weak_from_this(), source, provider = watched.provider](HttpCallResult answer) {
        source->in_flight = false;
        auto self = weak.lock();
        std::string error = std::move(answer.error);
        std::shared_ptr<const JwkSet> keys;
        if (error.empty() && answer.status != 200) {
          error = "status " + std::to_string(answer.status);
        } else if (error.empty()) {
          auto parsed = parse_jwk_set(answer.body);
          keys = std::move(parsed.set);
          if (!keys) error = std::move(parsed.error);
        }
        std::string& body = answer.body;
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
  std::erase_if(in_flight_, [](const auto& w) { return w.expired(); });
  in_flight_.push_back(call);
}

}  // namespace sluice
