#include "upstream/h2/nghttp2_memory.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>

#include "upstream/block_allocator.hpp"

namespace sluice {
namespace {

// Before each block: its size with the header (a multiple of 16, so that the
// block keeps malloc's alignment).
constexpr std::size_t kHeader = 16;

void* allocate(std::size_t size, void*) {
  const std::size_t total = size + kHeader;
  void* raw = nullptr;
  try {
    raw = block_cache::allocate(total);
  } catch (const std::bad_alloc&) {
    return nullptr;  // nghttp2 reports NGHTTP2_ERR_NOMEM
  }
  std::memcpy(raw, &total, sizeof total);
  return static_cast<char*>(raw) + kHeader;
}

void release(void* block, void*) {
  if (block == nullptr) return;
  char* raw = static_cast<char*>(block) - kHeader;
  std::size_t total = 0;
  std::memcpy(&total, raw, sizeof total);
  block_cache::deallocate(raw, total);
}

void* allocate_zeroed(std::size_t count, std::size_t size, void* user) {
  if (size != 0 && count > (static_cast<std::size_t>(-1) - kHeader) / size) return nullptr;
  void* block = allocate(count * size, user);
  if (block != nullptr) std::memset(block, 0, count * size);
  return block;
}

void* reallocate(void* block, std::size_t size, void* user) {
  if (block == nullptr) return allocate(size, user);
  if (size == 0) {
    release(block, user);
    return nullptr;
  }
  std::size_t total = 0;
  std::memcpy(&total, static_cast<char*>(block) - kHeader, sizeof total);
  void* moved = allocate(size, user);
  if (moved == nullptr) return nullptr;  // the old block stays, as realloc's
  std::memcpy(moved, block, std::min(size, total - kHeader));
  release(block, user);
  return moved;
}

nghttp2_mem memory{nullptr, allocate, release, allocate_zeroed, reallocate};

}  // namespace

nghttp2_mem* nghttp2_block_memory() { return &memory; }

}  // namespace sluice
