#include "telemetry/tracing_services.hpp"

#include <unistd.h>

#include <array>

#include <nlohmann/json.hpp>

#include "telemetry/otlp_json.hpp"
#include "telemetry/span_exporter.hpp"

namespace sluice {
namespace {

constexpr auto kShutdownWait = std::chrono::milliseconds(2000);

constexpr MetricFamily kTracingFamilies[] = {
    {"sluice_tracing_spans_total", "counter",
     "Spans of recorded requests, by result: exported (the collector took them), dropped (the "
     "queue was full) or failed (the collector refused them, or every try failed)."},
    {"sluice_tracing_queue_spans", "gauge", "Spans waiting to be exported."},
};

// service.instance.id: the host's name and the process id.
std::string instance_id() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  return std::string(host.data()) + ":" + std::to_string(getpid());
}

class TraceObserver final : public ExchangeObserver {
 public:
  explicit TraceObserver(std::shared_ptr<SpanExporter> exporter)
      : exporter_(std::move(exporter)) {}

  bool wants(const Config& config, bool trace_recorded) const override {
    return trace_recorded && config.tracing.enabled();
  }

  void on_exchange(const Config& config, const ExchangeSummary& summary) override {
    if (!wants(config, summary.trace != nullptr)) return;
    std::string spans;
    const std::size_t n = append_exchange_spans(spans, summary, SpanClock::now());
    exporter_->submit(std::move(spans), n);
  }

 private:
  std::shared_ptr<SpanExporter> exporter_;
};

class TracingServices final : public WorkerServices {
 public:
  TracingServices(std::unique_ptr<WorkerServices> inner, std::shared_ptr<SpanExporter> exporter,
                  const WorkerContext& worker)
      : inner_(std::move(inner)),
        exporter_(std::move(exporter)),
        first_(worker.index == 0),
        metrics_(worker.metrics) {
    if (first_) exporter_->configure(worker.config);
  }

  MiddlewareChain make_chain() override {
    MiddlewareChain chain = inner_->make_chain();
    chain.observers.push_back(std::make_shared<TraceObserver>(exporter_));
    return chain;
  }

  void before_scrape() override {
    inner_->before_scrape();
    if (!first_) return;
    const SpanExporter::Counts counts = exporter_->counts();
    const std::pair<const char*, std::uint64_t> results[] = {
        {"exported", counts.exported}, {"dropped", counts.dropped}, {"failed", counts.failed}};
    for (const auto& [result, n] : results) {
      metrics_.set("sluice_tracing_spans_total", scratch_labels({{"result", result}}),
                   static_cast<double>(n));
    }
    metrics_.set("sluice_tracing_queue_spans", "", static_cast<double>(counts.queued));
  }

  void on_config(const std::shared_ptr<const Config>& next) override {
    inner_->on_config(next);
    if (first_) exporter_->configure(next);
  }

  void on_stop() override {
    inner_->on_stop();
    if (first_) exporter_->shutdown(kShutdownWait);
  }

  DependencyState readiness() const override { return inner_->readiness(); }

 private:
  std::unique_ptr<WorkerServices> inner_;
  std::shared_ptr<SpanExporter> exporter_;
  bool first_;
  MetricsShard& metrics_;
};

class TracingFactory final : public WorkerServicesFactory {
 public:
  explicit TracingFactory(std::shared_ptr<WorkerServicesFactory> inner)
      : inner_(std::move(inner)), exporter_(std::make_shared<SpanExporter>(instance_id())) {
    register_metric_families(kTracingFamilies);
  }

  std::unique_ptr<WorkerServices> make(const WorkerContext& worker) override {
    return std::make_unique<TracingServices>(inner_->make(worker), exporter_, worker);
  }
  void seed_metrics(const Config& config, MetricsShard& metrics) const override {
    inner_->seed_metrics(config, metrics);
    for (const auto result : {"exported", "dropped", "failed"}) {
      metrics.declare("sluice_tracing_spans_total", scratch_labels({{"result", result}}));
    }
    metrics.declare("sluice_tracing_queue_spans", "");
  }
  void on_config_loaded(const Config& config) const override {
    inner_->on_config_loaded(config);
  }
  bool has_dependencies(const Config& config) const override {
    return inner_->has_dependencies(config);
  }
  nlohmann::json readiness(const std::vector<DependencyState>& workers) const override {
    return inner_->readiness(workers);
  }

 private:
  std::shared_ptr<WorkerServicesFactory> inner_;
  std::shared_ptr<SpanExporter> exporter_;
};

}  // namespace

std::shared_ptr<WorkerServicesFactory> with_tracing(std::shared_ptr<WorkerServicesFactory> inner) {
  return std::make_shared<TracingFactory>(std::move(inner));
}

}  // namespace sluice
