#include "gateway/series_cache.hpp"

#include "gateway/metrics.hpp"

namespace sluice {

SeriesCache::SeriesCache(MetricsShard& metrics, std::string family, std::string first_name,
                         std::string second_name)
    : metrics_(metrics),
      family_(std::move(family)),
      first_name_(std::move(first_name)),
      second_name_(std::move(second_name)) {}

double& SeriesCache::get(std::string_view first, std::string_view second) {
  if (auto it = series_.find(ValueViews(first, second)); it != series_.end()) return *it->second;
  const std::string_view labels =
      second_name_.empty() ? scratch_labels({{first_name_, first}})
                           : scratch_labels({{first_name_, first}, {second_name_, second}});
  double& value = metrics_.value_ref(family_, labels);
  series_.emplace(Values(first, second), &value);
  return value;
}

}  // namespace sluice
