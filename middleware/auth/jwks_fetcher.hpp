// Keeps the keys of every jwks_url provider fresh: a fetch when the source
// has no keys yet, every jwks_refresh_ms after the last attempt, and early
// when a token named an unknown kid, but never sooner than
// jwks_min_refresh_ms after the last attempt. A fetch is one GET over HTTP or
// HTTPS (the upstream TLS client: the URL's host verified), bounded in time
// (jwks_timeout_ms) and size (1 MiB); a failure keeps the keys there were and
// is counted. One fetcher per process, on one worker's executor.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <string>
#include <vector>

#include "gateway/config/config.hpp"
#include "gateway/metrics.hpp"

namespace sluice {

class HttpCall;

class JwksFetcher : public std::enable_shared_from_this<JwksFetcher> {
 public:
  JwksFetcher(boost::asio::io_context::executor_type executor, MetricsShard& metrics);

  // The providers of `config` whose keys come from a URL.
  void configure(const Config& config);
  void start();
  void close();

 private:
  struct Watched {
    std::string provider;
    std::shared_ptr<JwksSource> source;
  };
  void tick();
  void fetch(const Watched& watched);

  boost::asio::io_context::executor_type executor_;
  MetricsShard& metrics_;
  boost::asio::steady_timer timer_;
  std::vector<Watched> watched_;
  std::vector<std::weak_ptr<HttpCall>> in_flight_;  // the fetches under way
  bool closed_ = false;
};

std::span<const MetricFamily> jwks_metric_families();
void seed_jwks_metrics(const Config& config, MetricsShard& metrics);

}  // namespace sluice
