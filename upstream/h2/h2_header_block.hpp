// A header block for libnghttp2 built without a string per field: every name
// (lower-cased) and value goes into one buffer, reused from block to block,
// and nghttp2 copies the bytes when the block is submitted. Fields whose
// values change with every response (a request id, what a rate limit has
// left) are sent "never indexed" (HPACK): indexing them would add an entry
// to the connection's table, and evict another, on every response.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nghttp2/nghttp2.h>

namespace sluice {

class H2HeaderBlock {
 public:
  void clear() {
    bytes_.clear();
    fields_.clear();
  }
  // Appends a field, its name lower-cased.
  void add(std::string_view name, std::string_view value);
  std::size_t size() const { return fields_.size(); }
  // A field as added (the name lower-cased).
  std::pair<std::string_view, std::string_view> field(std::size_t i) const;
  // Whether field i is sent never indexed.
  bool never_indexed(std::size_t i) const { return fields_[i].flags & NGHTTP2_NV_FLAG_NO_INDEX; }
  // The block for nghttp2, `status` first when given (a response's
  // ":status"); valid until the next add or clear.
  std::span<const nghttp2_nv> nva(std::string_view status = {});

 private:
  struct Field {
    std::uint32_t name = 0;  // offsets and lengths in bytes_
    std::uint32_t name_size = 0;
    std::uint32_t value = 0;
    std::uint32_t value_size = 0;
    std::uint8_t flags = NGHTTP2_NV_FLAG_NONE;
  };
  std::string bytes_;
  std::vector<Field> fields_;
  std::vector<nghttp2_nv> nva_;
  char status_[3] = {};
};

// This thread's block, for a head built and submitted in one go.
H2HeaderBlock& thread_header_block();

// Whether a field of this (lower-case) name carries a value that changes
// with every response, sent never indexed.
bool h2_changes_per_response(std::string_view lower_name);

}  // namespace sluice
