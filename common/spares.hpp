// Emptied containers kept per thread for reuse, with their capacity: for the
// strings and vectors a request's Redis call is built from and its reply is
// read into, which would otherwise be allocated and freed once per call (the
// key, the arguments, the reply's strings). A container given back is
// cleared and kept if this thread keeps fewer than Keep of its type and its
// memory is at most MaxBytes; take() hands out the last one kept (or a new,
// empty one). A vector of strings gives its strings back one by one
// before it is kept itself.
//
// Per thread, so never shared: taking and giving need no lock, and a
// container given back on another thread joins that thread's spares. What is
// kept is bounded (Keep times MaxBytes per type and thread: 64 KiB of
// strings, 256 KiB of each kind of list, and for lists kept whole their
// elements too: a header list's strings, at most 256 bytes each) and freed
// when the thread ends; a
// container given back after that (a static destroyed at exit) is freed at
// once. Strings are kept only up to 1 KiB, so that a large one (a long
// batch's numbers) is not handed out for a short key and held while its call
// waits. Under AddressSanitizer nothing is kept, so that a string or list
// used after its owner gave it back is still caught.
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

template <class C, std::size_t Keep = 64,
          std::size_t MaxBytes = std::is_same_v<C, std::string> ? 1024 : 4096>
class Spares {
 public:
  // An empty container, with the capacity of the last one given back.
  static C take() noexcept(std::is_nothrow_default_constructible_v<C>) {
    Store& s = store;
    if (s.count == 0) return C{};
    C* kept = s.slot(--s.count);
    C out(std::move(*kept));
    kept->~C();
    return out;
  }

  // Clears `c` and keeps it (or frees it, when full or too large).
  static void give(C&& c) noexcept {
    if (!kKeeps) return;
    if (c.capacity() <= kInline || c.capacity() > MaxBytes / sizeof(typename C::value_type)) {
      return;  // the caller frees it
    }
    if constexpr (!kSparesKeepElements<C>) {
      release_elements(c);
      c.clear();  // first: clearing may give back to this same type (a reply's elements)
    }
    Store& s = store;
    if (s.closed || s.count == Keep) return;
    [[maybe_unused]] Cleanup* const registered = &cleanup;  // once per thread
    ::new (s.bytes + s.count * sizeof(C)) C(std::move(c));
    ++s.count;
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
    alignas(C) unsigned char bytes[Keep * sizeof(C)];
    std::size_t count;
    bool closed;
    // A kept container (one was placed there).
    C* slot(std::size_t i) { return std::launder(reinterpret_cast<C*>(bytes + i * sizeof(C))); }
  };
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
