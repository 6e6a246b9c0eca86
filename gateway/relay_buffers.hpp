// The relay buffers of one worker: kBytes each, lent to an exchange for its
// length, so that an idle connection holds none.
//
// A buffer given back is kept for the next exchange, as many as were out at
// once lately: a steady load of N exchanges in flight (an HTTP/2 connection
// may carry a hundred) then allocates none. Freeing and allocating 64 KiB
// blocks each time the number in flight moves costs more than the blocks:
// every such free and allocation makes glibc merge its lists of small free
// blocks. What a burst left behind is freed once it has sat unused for a whole
// period between two calls of age() (every few seconds), down to kAlwaysKept.
//
// Not thread-safe: one per worker, used on its thread.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace sluice {

class RelayBuffers {
 public:
  static constexpr std::size_t kBytes = 64 * 1024;
  // Up to this many are kept however long they sit unused.
  static constexpr std::size_t kAlwaysKept = 32;

  // A kept buffer, or a new one. Not zeroed: every byte is written before it is read.
  std::unique_ptr<char[]> take();
  // A buffer take() lent. Never allocates (an exchange's destructor gives
  // its buffer back): the list has room for every buffer lent.
  void give_back(std::unique_ptr<char[]> buffer) noexcept;
  // Frees the buffers kept beyond kAlwaysKept that no take() needed since the
  // last call; the bytes freed.
  std::size_t age();
  std::size_t kept() const { return kept_.size(); }

 private:
  std::vector<std::unique_ptr<char[]>> kept_;
  std::size_t lent_ = 0;
  // The fewest kept at any moment since the last age(): that many sat unused throughout.
  std::size_t fewest_kept_ = 0;
};

}  // namespace sluice
