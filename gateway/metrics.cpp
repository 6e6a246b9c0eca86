#include "gateway/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <iterator>
#include <mutex>
#include <vector>

namespace sluice {
namespace {

constexpr char kSep = '\x1f';

std::string make_key(std::string_view family, std::string_view labels) {
  std::string key;
  key.reserve(family.size() + 1 + labels.size());
  key.append(family).push_back(kSep);
  key.append(labels);
  return key;
}

std::pair<std::string_view, std::string_view> split_key(const std::string& key) {
  auto pos = key.find(kSep);
  std::string_view k{key};
  return {k.substr(0, pos), k.substr(pos + 1)};
}


std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::vector<MetricFamily>& registered() {
  static std::vector<MetricFamily> families;
  return families;
}

MergeRule merge_rule(std::string_view family) {
  std::lock_guard lock(registry_mutex());
  for (const auto& f : registered()) {
    if (f.name == family) return f.merge;
  }
  return MergeRule::kSum;
}

std::string format_value(double v) {
  if (v == static_cast<double>(static_cast<std::int64_t>(v))) {
    return fmt::format("{}", static_cast<std::int64_t>(v));
  }
  return fmt::format("{}", v);
}

std::string with_label(std::string_view labels, std::string_view extra) {
  if (labels.empty()) return std::string{extra};
  return fmt::format("{},{}", labels, extra);
}

}  // namespace

namespace detail {

// The hashes of the two parts, combined: the joined form splits at the separator.
std::size_t combine(std::string_view family, std::string_view labels) {
  const std::size_t h = std::hash<std::string_view>{}(family);
  return h ^ (std::hash<std::string_view>{}(labels) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
}

std::size_t MetricKeyHash::operator()(std::string_view joined) const {
  const auto pos = joined.find(kSep);
  return combine(joined.substr(0, pos), joined.substr(pos + 1));
}

std::size_t MetricKeyHash::operator()(const MetricKey& key) const {
  return combine(key.family, key.labels);
}

bool MetricKeyEqual::operator()(const MetricKey& a, std::string_view b) const {
  return b.size() == a.family.size() + 1 + a.labels.size() && b.starts_with(a.family) &&
         b[a.family.size()] == kSep && b.substr(a.family.size() + 1) == a.labels;
}

}  // namespace detail

void Histogram::observe(double seconds) {
  auto it = std::lower_bound(kLatencyBuckets.begin(), kLatencyBuckets.end(), seconds);
  ++counts[static_cast<std::size_t>(it - kLatencyBuckets.begin())];
  sum += seconds;
  ++count;
}

void Histogram::merge(const Histogram& other) {
  for (std::size_t i = 0; i < counts.size(); ++i) counts[i] += other.counts[i];
  sum += other.sum;
  count += other.count;
}

namespace {

// The series for (family, labels), created on first use.
template <class Map>
typename Map::mapped_type& series(Map& map, std::string_view family, std::string_view labels) {
  auto it = map.find(detail::MetricKey{family, labels});
  if (it == map.end())
    it = map.emplace(make_key(family, labels), typename Map::mapped_type{}).first;
  return it->second;
}

}  // namespace

void MetricsShard::add(std::string_view family, std::string_view labels, double value) {
  series(values_, family, labels) += value;
}

void MetricsShard::set(std::string_view family, std::string_view labels, double value) {
  series(values_, family, labels) = value;
}

void MetricsShard::observe(std::string_view family, std::string_view labels, double seconds) {
  series(histograms_, family, labels).observe(seconds);
}

void MetricsShard::declare(std::string_view family, std::string_view labels) {
  series(values_, family, labels);
}

void MetricsShard::declare_histogram(std::string_view family, std::string_view labels) {
  series(histograms_, family, labels);
}

double& MetricsShard::value_ref(std::string_view family, std::string_view labels) {
  return series(values_, family, labels);
}

Histogram& MetricsShard::histogram_ref(std::string_view family, std::string_view labels) {
  return series(histograms_, family, labels);
}

void MetricsShard::merge_into(MetricsSnapshot& into) const {
  for (const auto& [key, value] : values_) {
    auto [family, labels] = split_key(key);
    into.add(family, labels, value);
  }
  for (const auto& [key, h] : histograms_) {
    auto [family, labels] = split_key(key);
    into.add_histogram(family, labels, h);
  }
}

void MetricsSnapshot::add(std::string_view family, std::string_view labels, double value) {
  auto& samples = values_[std::string{family}];
  auto [it, inserted] = samples.try_emplace(std::string{labels}, value);
  if (inserted) return;
  switch (merge_rule(family)) {
    case MergeRule::kMin:
      it->second = std::min(it->second, value);
      break;
    case MergeRule::kMax:
      it->second = std::max(it->second, value);
      break;
    case MergeRule::kSum:
      it->second += value;
      break;
  }
}

void MetricsSnapshot::add_histogram(std::string_view family, std::string_view labels,
                                    const Histogram& h) {
  histograms_[std::string{family}][std::string{labels}].merge(h);
}

double MetricsSnapshot::value(std::string_view family, std::string_view labels) const {
  auto f = values_.find(std::string{family});
  if (f == values_.end()) return 0;
  auto v = f->second.find(std::string{labels});
  return v == f->second.end() ? 0 : v->second;
}

bool MetricsSnapshot::has(std::string_view family, std::string_view labels) const {
  auto f = values_.find(std::string{family});
  if (f != values_.end() && f->second.count(std::string{labels})) return true;
  auto h = histograms_.find(std::string{family});
  return h != histograms_.end() && h->second.count(std::string{labels});
}

namespace {

// The rest of a label set after its first pair (`a="x",b="y"` gives `b="y"`);
// empty when there is no second pair. Values may hold escaped quotes.
std::string_view after_first_label(std::string_view labels) {
  const auto open = labels.find("=\"");
  if (open == std::string_view::npos) return {};
  for (std::size_t i = open + 2; i < labels.size(); ++i) {
    if (labels[i] == '\\') {
      ++i;
    } else if (labels[i] == '"') {
      return i + 1 < labels.size() && labels[i + 1] == ',' ? labels.substr(i + 2)
                                                           : std::string_view{};
    }
  }
  return {};
}

}  // namespace

void MetricsSnapshot::cross_fill(std::string_view family, std::string_view first_name,
                                 const std::vector<std::string>& first_values) {
  auto& samples = values_[std::string{family}];
  std::vector<std::string> rests;
  for (const auto& [labels, value] : samples) {
    const auto rest = after_first_label(labels);
    if (!rest.empty() && std::find(rests.begin(), rests.end(), rest) == rests.end()) {
      rests.emplace_back(rest);
    }
  }
  for (const auto& first : first_values) {
    const std::string prefix = label(first_name, first);
    for (const auto& rest : rests) samples.try_emplace(prefix + "," + rest, 0.0);
  }
  if (samples.empty()) values_.erase(std::string{family});
}

std::string MetricsSnapshot::render() const {
  std::string out;
  std::vector<std::string> seen;
  auto render_family = [&](std::string_view name, std::string_view type, std::string_view help) {
    seen.emplace_back(name);
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    if (type == "histogram") {
      auto f = histograms_.find(std::string{name});
      if (f == histograms_.end()) return;
      for (const auto& [labels, h] : f->second) {
        std::uint64_t cumulative = 0;
        for (std::size_t i = 0; i < kLatencyBuckets.size(); ++i) {
          cumulative += h.counts[i];
          out += fmt::format("{}_bucket{{{}}} {}\n", name,
                             with_label(labels, fmt::format("le=\"{}\"", kLatencyBuckets[i])),
                             cumulative);
        }
        cumulative += h.counts.back();
        out += fmt::format("{}_bucket{{{}}} {}\n", name, with_label(labels, "le=\"+Inf\""),
                           cumulative);
        const auto braces = labels.empty() ? std::string{} : fmt::format("{{{}}}", labels);
        out +=
            fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, braces, h.sum, name, braces, h.count);
      }
      return;
    }
    auto f = values_.find(std::string{name});
    if (f == values_.end()) {
      if (type == "gauge") out += fmt::format("{} 0\n", name);
      return;
    }
    for (const auto& [labels, value] : f->second) {
      if (labels.empty()) {
        out += fmt::format("{} {}\n", name, format_value(value));
      } else {
        out += fmt::format("{}{{{}}} {}\n", name, labels, format_value(value));
      }
    }
  };
  for (const auto& family : metric_families()) {
    render_family(family.name, family.type, family.help);
  }
  // Families not in the table (added later by components) are still shown.
  for (const auto& [name, samples] : values_) {
    if (std::find(seen.begin(), seen.end(), name) == seen.end()) {
      render_family(name, "untyped", "Sluice metric.");
    }
  }
  return out;
}

void register_metric_families(std::span<const MetricFamily> families) {
  std::lock_guard lock(registry_mutex());
  auto& all = registered();
  const auto gateway = gateway_metric_families();
  for (const auto& family : families) {
    const bool own = std::any_of(gateway.begin(), gateway.end(),
                                 [&](const MetricFamily& f) { return f.name == family.name; });
    const bool known = std::any_of(all.begin(), all.end(), [&](const MetricFamily& f) {
      return f.name == family.name;
    });
    if (!own && !known) all.push_back(family);
  }
}

std::vector<MetricFamily> metric_families() {
  const auto gateway = gateway_metric_families();
  std::vector<MetricFamily> out(gateway.begin(), gateway.end());
  std::lock_guard lock(registry_mutex());
  out.insert(out.end(), registered().begin(), registered().end());
  return out;
}

std::string label(std::string_view name, std::string_view value) {
  return std::string{scratch_labels({{name, value}})};
}

std::string labels(std::string_view n1, std::string_view v1, std::string_view n2,
                   std::string_view v2) {
  return std::string{scratch_labels({{n1, v1}, {n2, v2}})};
}

std::string_view scratch_labels(
    std::initializer_list<std::pair<std::string_view, std::string_view>> pairs) {
  thread_local std::string out;
  // The usual case, config names that need no escaping: sized once and copied
  // in pieces (this runs for every counter a request moves).
  std::size_t size = 0;
  bool plain = true;
  for (const auto& [name, value] : pairs) {
    size += name.size() + value.size() + 4;  // name="value",
    for (char c : value) plain = plain && c != '\\' && c != '"' && c != '\n';
  }
  if (plain) {
    out.resize(size == 0 ? 0 : size - 1);
    char* at = out.data();
    for (const auto& [name, value] : pairs) {
      if (at != out.data()) *at++ = ',';
      at = std::copy(name.begin(), name.end(), at);
      *at++ = '=';
      *at++ = '"';
      at = std::copy(value.begin(), value.end(), at);
      *at++ = '"';
    }
    return out;
  }
  out.clear();
  for (const auto& [name, value] : pairs) {
    if (!out.empty()) out += ',';
    out.append(name).append("=\"");
    for (char c : value) {
      if (c == '\\' || c == '"') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    out += '"';
  }
  return out;
}

}  // namespace sluice
