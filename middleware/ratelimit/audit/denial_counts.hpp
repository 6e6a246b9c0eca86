// The denials one worker counted since its last flush, per limit and caller,
// in bounded memory. Up to `capacity` (limit, caller) pairs are held, each
// counted exactly. A new pair arriving when every place is taken makes room:
// the pairs with the smallest count leave, their exact counts set aside to go
// out with the flush while fewer than `capacity` are set aside; beyond that
// their denials are dropped (and counted). So a flood of distinct callers
// costs at most 2 x capacity pairs per flush, and every count sent is exact
// unless more than 2 x capacity distinct pairs were denied within one flush;
// even then a pair only loses denials while it has the smallest count held,
// which a caller with more than 1/capacity of the flush's denials never has
// for long. Pure, one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice {

class DenialCounts {
 public:
  struct Entry {
    std::string limit;
    std::string caller;
    std::uint64_t count = 0;
  };

  explicit DenialCounts(std::size_t capacity = 4096) : capacity_(capacity) {}

  void add(std::string_view limit, std::string_view caller);
  // Everything counted since the last take (held and set aside), and empty again.
  std::vector<Entry> take();
  bool empty() const { return held_.empty() && aside_.empty(); }
  std::size_t held() const { return held_.size(); }
  // Denials dropped since construction (never sent).
  std::uint64_t dropped() const { return dropped_; }

 private:
  void make_room();

  std::size_t capacity_;
  // limit + '\n' + caller (neither holds a newline) -> count
  std::unordered_map<std::string, std::uint64_t> held_;
  std::vector<Entry> aside_;
  std::uint64_t dropped_ = 0;
};

}  // namespace sluice
