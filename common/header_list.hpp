// Header name/value pairs in order, for the headers a request's steps add to
// its response and its upstream request, and for Sluice's own replies. A list
// that is cleared keeps its strings: one reused for every request of a
// connection fills the same strings again, and allocates nothing once they
// have grown to the longest name and value seen in their place (bounded by
// the config: limit names, consumer ids, numbers). A list that goes leaves
// its strings to the thread's next list. Header-only.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/spares.hpp"

namespace sluice {

// A list's slots, kept whole when it goes (HeaderList::~HeaderList; see
// kSparesKeepElements).
using HeaderSlots = std::vector<std::pair<std::string, std::string>>;
static_assert(kSparesKeepElements<HeaderSlots>);
// Up to 512 lists' slots per thread (one per request in flight: an HTTP/2
// stream's list is made for it), each of at most 16 fields, within the 256
// KiB of slots the spares keep of a type (256 lists of 16): their strings,
// up to 256 bytes each, come on top of that.
using HeaderSpares = Spares<HeaderSlots, 512>;

class HeaderList {
 public:
  using value_type = std::pair<std::string, std::string>;
  using iterator = std::vector<value_type>::iterator;
  using const_iterator = std::vector<value_type>::const_iterator;

  HeaderList() = default;
  // Its slots, strings and all, go to the thread's spares (when they are at
  // most 16 and their strings short), for the next list of the thread: a
  // list made for each request (an HTTP/2 stream's) fills strings already
  // grown.
  ~HeaderList() {
    if (slots_.capacity() > kMaxKeptSlots) return;
    for (const auto& [name, value] : slots_) {
      if (name.capacity() > kMaxKeptString || value.capacity() > kMaxKeptString) return;
    }
    HeaderSpares::give(std::move(slots_));
  }
  HeaderList(std::initializer_list<value_type> fields) : slots_(fields), size_(slots_.size()) {}
  // A copy holds the fields only, not the spare strings.
  HeaderList(const HeaderList& other) : slots_(other.begin(), other.end()), size_(other.size_) {}
  HeaderList& operator=(const HeaderList& other) {
    if (this != &other) {
      clear();
      for (const auto& [name, value] : other) emplace_back(name, value);
    }
    return *this;
  }
  HeaderList(HeaderList&& other) noexcept
      : slots_(std::move(other.slots_)), size_(std::exchange(other.size_, 0)) {}
  HeaderList& operator=(HeaderList&& other) noexcept {
    if (this != &other) {
      slots_ = std::move(other.slots_);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }

  // Appends a field whose value the caller writes into the returned string
  // (empty, with whatever capacity its slot kept; valid until the next add).
  std::string& add(std::string_view name) {
    if (slots_.capacity() == 0) slots_ = HeaderSpares::take();
    if (size_ == slots_.size()) slots_.emplace_back();
    auto& [slot_name, slot_value] = slots_[size_++];
    // A list reused for the same fields finds their names in place.
    if (std::string_view{slot_name} != name) slot_name.assign(name);
    slot_value.clear();
    return slot_value;
  }
  void emplace_back(std::string_view name, std::string_view value) { add(name).assign(value); }
  // By value: a field of this very list stays valid while it is copied in.
  void push_back(value_type field) { add(field.first).assign(field.second); }

  // Forgets the fields; their strings are kept for the next ones.
  void clear() noexcept { size_ = 0; }
  void reserve(std::size_t n) { slots_.reserve(n); }
  void swap(HeaderList& other) noexcept {
    slots_.swap(other.slots_);
    std::swap(size_, other.size_);
  }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  iterator begin() noexcept { return slots_.begin(); }
  iterator end() noexcept { return slots_.begin() + static_cast<std::ptrdiff_t>(size_); }
  const_iterator begin() const noexcept { return slots_.begin(); }
  const_iterator end() const noexcept { return slots_.begin() + static_cast<std::ptrdiff_t>(size_); }
  value_type& operator[](std::size_t i) { return slots_[i]; }
  const value_type& operator[](std::size_t i) const { return slots_[i]; }
  const value_type& front() const { return slots_[0]; }  // not empty()
  const value_type& back() const { return slots_[size_ - 1]; }  // not empty()

  friend bool operator==(const HeaderList& a, const HeaderList& b) {
    if (a.size_ != b.size_) return false;
    for (std::size_t i = 0; i < a.size_; ++i) {
      if (a.slots_[i] != b.slots_[i]) return false;
    }
    return true;
  }

 private:
  static constexpr std::size_t kMaxKeptString = 256;
  static constexpr std::size_t kMaxKeptSlots = 16;
  HeaderSlots slots_;  // the fields first, then spare strings
  std::size_t size_ = 0;
};

}  // namespace sluice
