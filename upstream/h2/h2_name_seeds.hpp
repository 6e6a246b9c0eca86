// One per HTTP/2 connection, either side (see H2HeaderBlock::nva).
#pragma once

#include <cstdint>

namespace sluice {

// Which of a connection's header blocks seed its HPACK table with the names
// of the fields sent never indexed: the first, then every kEvery-th, so that
// a name evicted since comes back.
class H2NameSeeds {
 public:
  static constexpr std::uint32_t kEvery = 64;
  // Whether the next block seeds.
  bool next() { return blocks_++ % kEvery == 0; }

 private:
  std::uint32_t blocks_ = 0;
};

}  // namespace sluice
