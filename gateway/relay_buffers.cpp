#include "gateway/relay_buffers.hpp"

#include <algorithm>

namespace sluice {

std::unique_ptr<char[]> RelayBuffers::take() {
  if (kept_.empty()) {
    fewest_kept_ = 0;
    return std::make_unique_for_overwrite<char[]>(kBytes);
  }
  auto buffer = std::move(kept_.back());
  kept_.pop_back();
  fewest_kept_ = std::min(fewest_kept_, kept_.size());
  return buffer;
}

void RelayBuffers::give_back(std::unique_ptr<char[]> buffer) {
  // What is kept never outnumbers what was lent at once: a buffer is made
  // only when none is kept.
  if (buffer) kept_.push_back(std::move(buffer));
}

std::size_t RelayBuffers::age() {
  const std::size_t spare = kept_.size() > kAlwaysKept ? kept_.size() - kAlwaysKept : 0;
  const std::size_t unused = std::min(fewest_kept_, spare);
  kept_.resize(kept_.size() - unused);
  if (kept_.capacity() > 4 * std::max(kept_.size(), kAlwaysKept)) kept_.shrink_to_fit();
  fewest_kept_ = kept_.size();
  return unused * kBytes;
}

}  // namespace sluice
