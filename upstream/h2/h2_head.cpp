#include "upstream/h2/h2_head.hpp"

#include <charconv>

#include "common/ascii.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {
H2Fields h2_trailer_fields(const HttpFields& trailers) {
  H2Fields out;
  for (const auto& f : trailers) {
    std::string name(f.name_string());
    ascii::to_lower_in_place(name);
    if (is_connection_specific(name) || name == "te" || name == "host") continue;
    out.emplace_back(std::move(name), std::string(f.value()));
  }
  return out;
}

std::optional<unsigned> h2_status(std::string_view value) {
  unsigned status = 0;
  if (value.size() != 3) return std::nullopt;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + 3, status);
  if (ec != std::errc() || end != value.data() + 3 || status < 100) return std::nullopt;
  return status;
}

std::optional<std::uint64_t> h2_content_length(std::string_view value) {
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (value.empty() || ec != std::errc() || end != value.data() + value.size()) {
    return std::nullopt;
  }
  return n;
}

}  // namespace sluice
