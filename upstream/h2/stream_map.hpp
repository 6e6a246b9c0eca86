// The open streams of one HTTP/2 connection, by id, on either side (a client
// connection's, an upstream connection's). nghttp2's callbacks for one frame
// (a HEADERS' fields, one by one) ask for the same stream in a row: the last
// one found is remembered, and forgotten as it leaves, so a lookup by id is a
// map search only when the stream changes. Nodes come from the thread's block
// cache (BlockMap). Header-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "upstream/block_allocator.hpp"

namespace sluice {

template <class Stream>
class StreamMap {
 public:
  using Map = BlockMap<std::int32_t, std::shared_ptr<Stream>>;

  // The stream of `id`, null when it is not open.
  Stream* find(std::int32_t id) {
    if (id == last_id_ && last_ != nullptr) return last_;
    const auto it = map_.find(id);
    if (it == map_.end()) return nullptr;
    last_id_ = id;
    last_ = it->second.get();
    return last_;
  }

  void emplace(std::int32_t id, std::shared_ptr<Stream> stream) {
    map_.emplace(id, std::move(stream));
  }

  // The stream of `id` leaves the map (null when it was not there).
  std::shared_ptr<Stream> take(std::int32_t id) {
    const auto it = map_.find(id);
    if (it == map_.end()) return nullptr;
    std::shared_ptr<Stream> stream = std::move(it->second);
    map_.erase(it);
    if (last_ == stream.get()) last_ = nullptr;
    return stream;
  }

  // Every stream leaves the map, in id order.
  Map take_all() {
    last_ = nullptr;
    return std::exchange(map_, Map{});
  }

  bool empty() const { return map_.empty(); }
  std::size_t size() const { return map_.size(); }
  typename Map::iterator begin() { return map_.begin(); }
  typename Map::iterator end() { return map_.end(); }

 private:
  Map map_;
  std::int32_t last_id_ = 0;
  Stream* last_ = nullptr;
};

}  // namespace sluice
