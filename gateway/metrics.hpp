// Metrics: named counters, gauges and
// histograms kept per worker in a MetricsShard that only its worker touches,
// merged into a snapshot at scrape time and rendered as Prometheus text 0.0.4.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice {

// Bucket bounds in seconds, 50 µs to 10 s.
inline constexpr std::array<double, 17> kLatencyBuckets = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,    0.1,    0.25,    0.5,    1.0,   2.5,    5.0,   10.0};

struct Histogram {
  std::array<std::uint64_t, kLatencyBuckets.size() + 1> counts{};  // last = +Inf
  double sum = 0;
  std::uint64_t count = 0;
  void observe(double seconds);
  void merge(const Histogram& other);
};

namespace detail {
// Keys are "family\x1flabels"; lookups hash the two parts without joining them.
struct MetricKey {
  std::string_view family;
  std::string_view labels;
};
struct MetricKeyHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view joined) const;
  std::size_t operator()(const std::string& joined) const {
    return (*this)(std::string_view{joined});
  }
  std::size_t operator()(const MetricKey& key) const;
};
struct MetricKeyEqual {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
  bool operator()(const MetricKey& a, std::string_view b) const;
  bool operator()(std::string_view a, const MetricKey& b) const { return (*this)(b, a); }
};
}  // namespace detail

// How the workers' series of a family combine at scrape time.
enum class MergeRule {
  kSum,  // counters, and gauges each worker holds a share of
  kMin,  // a health gauge that is 1 only when every worker's is ("all up")
  kMax,  // a gauge any worker may raise ("any breaker open"), or one process-wide value
};

// A metric family as its owner declares it: the gateway declares its own
// (requests, upstreams, connections ...); each middleware declares the
// families it counts (register_metric_families), and the scrape renders
// every declared family with its HELP and TYPE, samples or not.
struct MetricFamily {
  std::string_view name;
  std::string_view type;  // counter, gauge or histogram
  std::string_view help;
  MergeRule merge = MergeRule::kSum;
};

// Adds a module's families (their strings must outlive the process: string
// literals). At startup, before the first scrape; any thread. A name declared
// twice keeps its first declaration.
void register_metric_families(std::span<const MetricFamily> families);

// Every declared family: the gateway's own, then the registered ones in order.
std::vector<MetricFamily> metric_families();
// The gateway's own families (metric_families.cpp).
std::span<const MetricFamily> gateway_metric_families();

// `labels` below is a rendered label set without braces, e.g.
// route="orders",code="200" (see label()). Empty means no labels.
// Updating an existing series allocates nothing.
class MetricsShard {
 public:
  void add(std::string_view family, std::string_view labels, double value = 1);
  void set(std::string_view family, std::string_view labels,
           double value);  // gauge, summed over shards
  void observe(std::string_view family, std::string_view labels, double seconds);
  // Creates the series with value 0 (an empty histogram) if it does not exist
  // yet, so that it is exposed before its first event. For startup and reload.
  void declare(std::string_view family, std::string_view labels);
  void declare_histogram(std::string_view family, std::string_view labels);
  // The series itself (created at 0 if new), for a caller that counts it
  // often: series are never removed, so the reference lasts as the shard does.
  double& value_ref(std::string_view family, std::string_view labels);
  Histogram& histogram_ref(std::string_view family, std::string_view labels);

  // Merges this shard into `into` (used when scraping).
  void merge_into(class MetricsSnapshot& into) const;

 private:
  friend class MetricsSnapshot;
  template <class T>
  using Map = std::unordered_map<std::string, T, detail::MetricKeyHash, detail::MetricKeyEqual>;
  Map<double> values_;         // "family\x1flabels"
  Map<Histogram> histograms_;  // "family\x1flabels"
};

class MetricsSnapshot {
 public:
  void add(std::string_view family, std::string_view labels, double value);
  void add_histogram(std::string_view family, std::string_view labels, const Histogram& h);
  // Prometheus text format 0.0.4; the known families always appear
  // with their HELP and TYPE lines, even before the first sample.
  std::string render() const;
  double value(std::string_view family, std::string_view labels) const;  // for tests
  bool has(std::string_view family, std::string_view labels) const;      // for tests

  // For a counter labelled by `first_name` then one more label (route, code):
  // adds a zero series for every value of `first_values` combined with every
  // value of the second label that any series of the family has. Scrape time.
  void cross_fill(std::string_view family, std::string_view first_name,
                  const std::vector<std::string>& first_values);

 private:
  std::map<std::string, std::map<std::string, double>> values_;
  std::map<std::string, std::map<std::string, Histogram>> histograms_;
};

// One label pair with the value escaped: name="value".
std::string label(std::string_view name, std::string_view value);
// Two label pairs joined by a comma.
std::string labels(std::string_view n1, std::string_view v1, std::string_view n2,
                   std::string_view v2);

// Label pairs rendered into a per-thread scratch buffer, for the request path:
// no allocation once warm. The view is valid until the next call on this thread.
std::string_view scratch_labels(
    std::initializer_list<std::pair<std::string_view, std::string_view>> pairs);

}  // namespace sluice
