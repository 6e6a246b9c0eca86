// Objects of one type kept for reuse, up to a bound: for state the request
// path would otherwise allocate and free once per request. Not thread-safe
// (one per worker). An object is handed back as the caller leaves it: the
// caller empties what it must not keep.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace sluice {

template <class T>
class Recycler {
 public:
  explicit Recycler(std::size_t keep) : keep_(keep) {}

  std::unique_ptr<T> take() {
    if (spare_.empty()) return std::make_unique<T>();
    std::unique_ptr<T> object = std::move(spare_.back());
    spare_.pop_back();
    return object;
  }

  // Kept for a later take(), or freed when `keep` are kept already.
  void give_back(std::unique_ptr<T> object) {
    if (object && spare_.size() < keep_) spare_.push_back(std::move(object));
  }

  std::size_t kept() const { return spare_.size(); }

 private:
  std::size_t keep_;
  std::vector<std::unique_ptr<T>> spare_;
};

}  // namespace sluice
