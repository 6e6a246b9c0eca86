// A header block for libnghttp2 built without a string per field: every name
// (lower-cased) and value goes into one buffer, reused from block to block,
// and nghttp2 copies the bytes when the block is submitted. Both HTTP/2
// sides use it: a response head to a client, a request head (and its
// trailers) to an upstream. A block that goes gives its buffers to the
// thread's spares (common/spares.hpp), and a new block's first field takes
// them: a request's blocks allocate nothing once the worker has served a few.
//
// Fields whose values change with every message (a request or trace id,
// what a rate limit has left) are sent "never indexed" (HPACK): indexing
// them would add an entry to the connection's table and evict another on
// every message, and nghttp2, which finds entries by name, would compare
// the value with each of that name's dozens of entries before adding one.
// Their names are still worth indexing: a connection's first block, and
// every H2NameSeeds::kEvery-th, sends them indexed (nva(status, true)), so
// that the table holds each such name (with one of its values) and the
// blocks in between send it as an index, the value alone literal (nghttp2
// looks a never-indexed field's name up in the table).
#pragma once

#include <cstdint>
#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nghttp2/nghttp2.h>

namespace sluice {

class H2HeaderBlock {
 public:
  using Field = std::pair<std::string_view, std::string_view>;

  H2HeaderBlock() = default;
  H2HeaderBlock(std::initializer_list<Field> fields);
  // A copy has the fields; nghttp2's list (pointers into the original) is
  // made again by its own nva().
  H2HeaderBlock(const H2HeaderBlock& other)
      : bytes_(other.bytes_, 0, other.used_), used_(other.used_), fields_(other.fields_) {}
  H2HeaderBlock& operator=(const H2HeaderBlock& other) {
    bytes_.assign(other.bytes_, 0, other.used_);
    used_ = other.used_;
    fields_ = other.fields_;
    nva_.clear();
    return *this;
  }
  H2HeaderBlock(H2HeaderBlock&& other) noexcept
      : bytes_(std::move(other.bytes_)),
        used_(std::exchange(other.used_, 0)),
        fields_(std::move(other.fields_)),
        nva_(std::move(other.nva_)) {
    nva_.clear();  // its entries point into `other`
  }
  H2HeaderBlock& operator=(H2HeaderBlock&& other) noexcept {
    bytes_ = std::move(other.bytes_);
    used_ = std::exchange(other.used_, 0);
    fields_ = std::move(other.fields_);
    nva_ = std::move(other.nva_);
    nva_.clear();  // its entries point into `other`
    return *this;
  }
  ~H2HeaderBlock();

  void clear() {
    used_ = 0;
    fields_.clear();
  }
  // Room for `fields` fields of `bytes` bytes in all, so that a block built
  // once (a request head) grows its buffers once.
  void reserve(std::size_t bytes, std::size_t fields) {
    if (fields_.capacity() == 0) take_spares();
    if (bytes_.size() < bytes) bytes_.resize(bytes);
    fields_.reserve(fields);
  }
  // Appends a field, its name lower-cased.
  void add(std::string_view name, std::string_view value);
  std::size_t size() const { return fields_.size(); }
  bool empty() const { return fields_.empty(); }
  // A field as added (the name lower-cased).
  Field field(std::size_t i) const;
  Field operator[](std::size_t i) const { return field(i); }
  // Whether field i is sent never indexed.
  bool never_indexed(std::size_t i) const { return fields_[i].changes; }
  // The same fields in the same order.
  bool operator==(const H2HeaderBlock& other) const;

  // The fields in order, as (name, value).
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Field;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = Field;

    Iterator() = default;
    Iterator(const H2HeaderBlock* block, std::size_t i) : block_(block), i_(i) {}
    Field operator*() const { return block_->field(i_); }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator before = *this;
      ++i_;
      return before;
    }
    bool operator==(const Iterator& other) const { return i_ == other.i_; }

   private:
    const H2HeaderBlock* block_ = nullptr;
    std::size_t i_ = 0;
  };
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, fields_.size()}; }

  // The block for nghttp2, `status` first when given (a response's
  // ":status"); valid until the next nva() (const as it is: it rebuilds the
  // list the block keeps), add or clear. With `seed`, the fields never
  // indexed for their changing values are indexed (H2NameSeeds).
  std::span<const nghttp2_nv> nva(std::string_view status = {}, bool seed = false) const;

 private:
  struct Slot {
    std::uint32_t name = 0;  // offsets and lengths in bytes_
    std::uint32_t name_size = 0;
    std::uint32_t value = 0;
    std::uint32_t value_size = 0;
    // Its value changes with every message (h2_changes_per_message): sent
    // never indexed, but indexed when the block seeds (H2NameSeeds).
    bool changes = false;
  };
  // The buffers of a block gone, for a new block's first field (or reserve).
  void take_spares();

  // The fields' bytes are bytes_[0, used_): bytes_ is sized to what it can
  // hold, so that a field is copied in without std::string's own checks.
  std::string bytes_;
  std::size_t used_ = 0;
  std::vector<Slot> fields_;
  mutable std::vector<nghttp2_nv> nva_;
  mutable char status_[3] = {};
};

// This thread's block, for a head built and submitted in one go.
H2HeaderBlock& thread_header_block();

// Whether a field of this (lower-case) name carries a value that changes
// with every message, sent never indexed: x-request-id, the trace context
// (traceparent, tracestate, b3 and its x-b3- fields, uber-trace-id,
// x-amzn-trace-id, x-cloud-trace-context), Sluice's rate-limit fields, and
// any name ending in -request-id, -requestid, -trace-id, -correlation-id or
// -span-id (an id a server echoes, say).
bool h2_changes_per_message(std::string_view lower_name);

}  // namespace sluice
