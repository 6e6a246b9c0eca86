// The series of one labelled family that a worker bumps on the request path,
// found by their label values in a small map and kept: a hit hashes and
// compares the values, where MetricsShard::add renders the label set, escapes
// it and looks it up (some 600 instructions). Each entry holds the shard's
// own series (series are never removed), so what is counted and exposed is
// exactly what add() would have done. Used on the shard's thread only.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace sluice {

class MetricsShard;

class SeriesCache {
 public:
  // A family with one label (`second_name` empty) or two.
  SeriesCache(MetricsShard& metrics, std::string family, std::string first_name,
              std::string second_name = {});

  // The series of these label values, created at 0 when new.
  double& get(std::string_view first, std::string_view second = {});
  void add(std::string_view first, double value = 1) { get(first) += value; }
  void add(std::string_view first, std::string_view second, double value = 1) {
    get(first, second) += value;
  }

  std::size_t size() const { return series_.size(); }

 private:
  using Values = std::pair<std::string, std::string>;
  using ValueViews = std::pair<std::string_view, std::string_view>;
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(const ValueViews& v) const {
      const std::size_t h = std::hash<std::string_view>{}(v.first);
      return h ^ (std::hash<std::string_view>{}(v.second) + 0x9e3779b97f4a7c15ULL + (h << 6) +
                  (h >> 2));
    }
    std::size_t operator()(const Values& v) const { return (*this)(ValueViews(v.first, v.second)); }
  };
  struct Equal {
    using is_transparent = void;
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      return std::string_view(a.first) == std::string_view(b.first) &&
             std::string_view(a.second) == std::string_view(b.second);
    }
  };

  MetricsShard& metrics_;
  std::string family_;
  std::string first_name_;
  std::string second_name_;
  std::unordered_map<Values, double*, Hash, Equal> series_;
};

}  // namespace sluice
