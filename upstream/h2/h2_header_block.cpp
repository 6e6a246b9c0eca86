#include "upstream/h2/h2_header_block.hpp"

#include <algorithm>
#include <cstring>

#include "common/ascii.hpp"
#include "common/spares.hpp"

namespace sluice {
namespace {

// nghttp2 takes non-const pointers, and copies the bytes.
std::uint8_t* bytes_at(const std::string& bytes, std::uint32_t at) {
  return reinterpret_cast<std::uint8_t*>(const_cast<char*>(bytes.data() + at));
}

}  // namespace

// Called for every field of every block: most names are told apart by
// their first letter and length before any comparison.
bool h2_changes_per_message(std::string_view name) {
  if (name.size() < 2 || name[0] == ':') return false;
  if (name.ends_with("id")) {
    // x-request-id, uber-trace-id, x-amzn-trace-id, x-b3-traceid...
    return name.ends_with("-request-id") || name.ends_with("-requestid") ||
           name.ends_with("-trace-id") || name.ends_with("-correlation-id") ||
           name.ends_with("-span-id") || name.starts_with("x-b3-");
  }
  switch (name[0]) {
    case 'b':
      return name == "b3";
    case 'r':
      return name == "ratelimit" || name == "retry-after";
    case 't':
      return name == "traceparent" || name == "tracestate";
    case 'x':
      return name.starts_with("x-b3-") || name == "x-ratelimit-remaining" ||
             name == "x-ratelimit-reset" || name == "x-cloud-trace-context";
    default:
      return false;
  }
}

H2HeaderBlock::H2HeaderBlock(std::initializer_list<Field> fields) {
  for (const auto& [name, value] : fields) add(name, value);
}

namespace {

// A block's bytes: a request head with its cookies may take a few KiB, so
// these are kept up to 8 KiB each (and 512 KiB a thread), apart from the
// strings other code keeps.
template <class T>
using BlockSpares = Spares<T, 512, 8 * 1024, 512 * 1024>;

}  // namespace

H2HeaderBlock::~H2HeaderBlock() {
  BlockSpares<std::string>::give(std::move(bytes_));
  BlockSpares<std::vector<Slot>>::give(std::move(fields_));
  BlockSpares<std::vector<nghttp2_nv>>::give(std::move(nva_));
}

void H2HeaderBlock::take_spares() {
  if (bytes_.empty()) {
    // Its capacity is kept; only what add() grows into is filled.
    bytes_ = BlockSpares<std::string>::take();
    bytes_.resize(256);
  }
  fields_ = BlockSpares<std::vector<Slot>>::take();
}

void H2HeaderBlock::add(std::string_view name, std::string_view value) {
  if (fields_.capacity() == 0) take_spares();
  const std::size_t n = name.size() + value.size();
  if (bytes_.size() - used_ < n) bytes_.resize(std::max(used_ + n, 2 * bytes_.size()));
  Slot f;
  f.name = static_cast<std::uint32_t>(used_);
  f.name_size = static_cast<std::uint32_t>(name.size());
  f.value = f.name + f.name_size;
  f.value_size = static_cast<std::uint32_t>(value.size());
  char* const lower = bytes_.data() + used_;
  if (!name.empty()) std::memcpy(lower, name.data(), name.size());
  if (!value.empty()) std::memcpy(lower + name.size(), value.data(), value.size());
  used_ += n;
  ascii::to_lower_in_place(lower, name.size());
  f.changes = h2_changes_per_message({lower, name.size()});
  fields_.push_back(f);
}

H2HeaderBlock::Field H2HeaderBlock::field(std::size_t i) const {
  const Slot& f = fields_[i];
  const std::string_view bytes(bytes_);
  return {bytes.substr(f.name, f.name_size), bytes.substr(f.value, f.value_size)};
}

bool H2HeaderBlock::operator==(const H2HeaderBlock& other) const {
  if (size() != other.size()) return false;
  for (std::size_t i = 0; i < size(); ++i) {
    if (field(i) != other.field(i)) return false;
  }
  return true;
}

std::span<const nghttp2_nv> H2HeaderBlock::nva(std::string_view status, bool seed) const {
  static constexpr char kStatus[] = ":status";
  nva_.clear();
  if (nva_.capacity() == 0) nva_ = BlockSpares<std::vector<nghttp2_nv>>::take();
  nva_.reserve(fields_.size() + 1);  // grown once
  if (!status.empty()) {
    const std::size_t n = std::min(status.size(), sizeof status_);
    std::copy_n(status.data(), n, status_);
    nva_.push_back({reinterpret_cast<std::uint8_t*>(const_cast<char*>(kStatus)),
                    reinterpret_cast<std::uint8_t*>(status_), sizeof kStatus - 1, n,
                    NGHTTP2_NV_FLAG_NONE});
  }
  for (const Slot& f : fields_) {
    nva_.push_back({bytes_at(bytes_, f.name), bytes_at(bytes_, f.value), f.name_size,
                    f.value_size,
                    f.changes && !seed ? std::uint8_t{NGHTTP2_NV_FLAG_NO_INDEX}
                                       : std::uint8_t{NGHTTP2_NV_FLAG_NONE}});
  }
  return nva_;
}

H2HeaderBlock& thread_header_block() {
  thread_local H2HeaderBlock block;
  return block;
}

}  // namespace sluice
