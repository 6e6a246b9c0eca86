#include "gateway/relay_buffers.hpp"

#include <algorithm>
#include <utility>

namespace sluice {

std::unique_ptr<char[]> RelayBuffers::take() {
  if (kept_.empty()) {
    // Room for every buffer out to come back (give_back never allocates).
    kept_.reserve(lent_ + 1);
    auto buffer = std::make_unique_for_overwrite<char[]>(kBytes);
    ++lent_;
    return buffer;
  }
  auto buffer = std::move(kept_.back());
  kept_.pop_back();
  ++lent_;
  fewest_kept_ = std::min(fewest_kept_, kept_.size());
  return buffer;
}

void RelayBuffers::give_back(std::unique_ptr<char[]> buffer) noexcept {
  if (!buffer) return;
  --lent_;
  // Within the capacity reserved when it was made (or kept when shrunk).
  kept_.push_back(std::move(buffer));
}

std::size_t RelayBuffers::age() {
  const std::size_t spare = kept_.size() > kAlwaysKept ? kept_.size() - kAlwaysKept : 0;
  const std::size_t unused = std::min(fewest_kept_, spare);
  kept_.resize(kept_.size() - unused);
  const std::size_t room = kept_.size() + lent_;  // all that may come back
  if (kept_.capacity() > 4 * std::max(room, kAlwaysKept)) {
    std::vector<std::unique_ptr<char[]>> smaller;
    smaller.reserve(room);
    for (auto& buffer : kept_) smaller.push_back(std::move(buffer));
    kept_ = std::move(smaller);
  }
  fewest_kept_ = kept_.size();
  return unused * kBytes;
}

}  // namespace sluice
