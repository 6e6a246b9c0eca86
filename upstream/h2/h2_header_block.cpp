#include "upstream/h2/h2_header_block.hpp"

#include <algorithm>

#include "common/ascii.hpp"

namespace sluice {
namespace {

std::uint8_t* bytes_at(std::string& bytes, std::uint32_t at) {
  return reinterpret_cast<std::uint8_t*>(bytes.data() + at);
}

}  // namespace

bool h2_changes_per_response(std::string_view name) {
  static constexpr std::string_view kChanging[] = {
      "x-request-id", "x-ratelimit-remaining", "x-ratelimit-reset", "ratelimit", "retry-after"};
  return std::find(std::begin(kChanging), std::end(kChanging), name) != std::end(kChanging);
}

void H2HeaderBlock::add(std::string_view name, std::string_view value) {
  Field f;
  f.name = static_cast<std::uint32_t>(bytes_.size());
  f.name_size = static_cast<std::uint32_t>(name.size());
  bytes_.append(name);
  std::transform(bytes_.begin() + f.name, bytes_.end(), bytes_.begin() + f.name, ascii::to_lower);
  f.value = static_cast<std::uint32_t>(bytes_.size());
  f.value_size = static_cast<std::uint32_t>(value.size());
  bytes_.append(value);
  if (h2_changes_per_response(std::string_view(bytes_).substr(f.name, f.name_size))) {
    f.flags = NGHTTP2_NV_FLAG_NO_INDEX;
  }
  fields_.push_back(f);
}

std::pair<std::string_view, std::string_view> H2HeaderBlock::field(std::size_t i) const {
  const Field& f = fields_[i];
  const std::string_view bytes(bytes_);
  return {bytes.substr(f.name, f.name_size), bytes.substr(f.value, f.value_size)};
}

std::span<const nghttp2_nv> H2HeaderBlock::nva(std::string_view status) {
  static constexpr char kStatus[] = ":status";
  nva_.clear();
  if (!status.empty()) {
    const std::size_t n = std::min(status.size(), sizeof status_);
    std::copy_n(status.data(), n, status_);
    nva_.push_back({reinterpret_cast<std::uint8_t*>(const_cast<char*>(kStatus)),
                    reinterpret_cast<std::uint8_t*>(status_), sizeof kStatus - 1, n,
                    NGHTTP2_NV_FLAG_NONE});
  }
  for (const Field& f : fields_) {
    nva_.push_back({bytes_at(bytes_, f.name), bytes_at(bytes_, f.value), f.name_size,
                    f.value_size, f.flags});
  }
  return nva_;
}

H2HeaderBlock& thread_header_block() {
  thread_local H2HeaderBlock block;
  return block;
}

}  // namespace sluice
