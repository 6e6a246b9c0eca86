// Emptied containers kept per thread for reuse, with their capacity: for the
// strings and vectors a request's Redis call is built from and its reply is
// read into, which would otherwise be allocated and freed once per call (the
// key, the arguments, the reply's strings, a batch's lists). A container
// given back is cleared and kept if this thread keeps fewer than Keep of its
// type, its memory is at most MaxBytes and all kept of its type stay within
// TotalBytes; take() hands out the last one kept (or a new, empty one). Keep
// is as many as the requests in flight on a worker hold at once (hundreds:
// an HTTP/2 connection carries many), so that their number moving up and
// down does not free and allocate them again. A
// vector of strings gives its strings back one by one before it is kept
// itself.
//
// Per thread, so never shared: taking and giving need no lock, and a
// container given back on another thread joins that thread's spares. What is
// kept is bounded (TotalBytes per type and thread: 256 KiB of strings and of
// each kind of list, counted by their own capacity; for lists kept whole,
// their elements come on top: a header list's strings, at most 256 bytes
// each) and freed when the thread ends; a
// container given back after that (a static destroyed at exit) is freed at
// once. Strings are kept only up to 1 KiB, so that a large one (a long
// batch's numbers) is not handed out for a short key and held while its call
// waits. A list may hold up to 64 KiB: the lists of a batch of decisions are
// as long as the requests of one loop turn (hundreds under load), and a list
// that large, freed and allocated again each time, costs the heap more than
// its size (glibc merges its small free blocks on each). Under
// AddressSanitizer nothing is kept, so that a string or list used after its
// owner gave it back is still caught.
#pragma once

#include <cstddef>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLUICE_HAS_ASAN_FEATURE 1
#endif
#endif
#ifndef SLUICE_HAS_ASAN_FEATURE
#define SLUICE_HAS_ASAN_FEATURE 0
#endif

namespace sluice {

// Whether containers of type C are kept with their elements in place (the
// next user overwrites them: strings keep their capacity), not cleared: lists
// of string pairs (HeaderList's slots, common/header_list.hpp) are.
template <class C>
inline constexpr bool kSparesKeepElements = false;
template <>
inline constexpr bool kSparesKeepElements<std::vector<std::pair<std::string, std::string>>> = true;

template <class C, std::size_t Keep = 512,
          std::size_t MaxBytes = std::is_same_v<C, std::string> ? 1024 : 64 * 1024,
          std::size_t TotalBytes = 256 * 1024>
class Spares {
 public:
  // An empty container, with the capacity of the last one given back.
  static C take() noexcept(std::is_nothrow_default_constructible_v<C>) {
    Store& s = store;
    if (s.count == 0) return C{};
    C* kept = s.slot(--s.count);
    s.bytes -= bytes_of(*kept);
    C out(std::move(*kept));
    kept->~C();
    return out;
  }

  // Clears `c` and keeps it (or frees it, when full or too large).
  static void give(C&& c) noexcept {
    if (!kKeeps) return;
    if (c.capacity() <= kInline || bytes_of(c) > MaxBytes) {
      return;  // the caller frees it
    }
    if constexpr (!kSparesKeepElements<C>) {
      release_elements(c);
      c.clear();  // first: clearing may give back to this same type (a reply's elements)
    }
    Store& s = store;
    const std::size_t bytes = bytes_of(c);
    if (s.closed || s.count == Keep || s.bytes + bytes > TotalBytes) return;
    [[maybe_unused]] Cleanup* const registered = &cleanup;  // once per thread
    ::new (s.room + s.count * sizeof(C)) C(std::move(c));
    ++s.count;
    s.bytes += bytes;
  }

  // How many this thread keeps (for tests).
  static std::size_t kept() noexcept { return store.count; }

#if defined(__SANITIZE_ADDRESS__) || SLUICE_HAS_ASAN_FEATURE
  static constexpr bool kKeeps = false;
#else
  static constexpr bool kKeeps = true;
#endif

 private:
  // What an empty one holds without the heap (a string's own buffer): not
  // worth keeping.
  static constexpr std::size_t kInline = [] {
    if constexpr (std::is_same_v<C, std::string>) {
      return std::string{}.capacity();
    } else {
      return std::size_t{0};
    }
  }();

  // Trivially destructible, so that it outlives everything else on the
  // thread; Cleanup frees what it holds and closes it.
  struct Store {
    alignas(C) unsigned char room[Keep * sizeof(C)];
    std::size_t count;
    std::size_t bytes;  // the heap memory of those kept
    bool closed;
    // A kept container (one was placed there).
    C* slot(std::size_t i) { return std::launder(reinterpret_cast<C*>(room + i * sizeof(C))); }
  };

  static std::size_t bytes_of(const C& c) noexcept {
    return c.capacity() * sizeof(typename C::value_type);
  }
  struct Cleanup {
    ~Cleanup() {
      store.closed = true;
      while (store.count > 0) store.slot(--store.count)->~C();
    }
  };

  static void release_elements(C& c) noexcept {
    if constexpr (std::is_same_v<C, std::vector<std::string>>) {
      for (std::string& s : c) Spares<std::string>::give(std::move(s));
    }
  }

  static inline thread_local Store store{};
  static inline thread_local Cleanup cleanup;
};

inline void keep_spare(std::string&& s) noexcept {
  Spares<std::string>::give(std::move(s));
}
template <class T>
void keep_spare(std::vector<T>&& v) noexcept {
  Spares<std::vector<T>>::give(std::move(v));
}

}  // namespace sluice
