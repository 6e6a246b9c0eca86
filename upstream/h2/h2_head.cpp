#include "upstream/h2/h2_head.hpp"

#include <charconv>

#include "common/ascii.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {
void h2_trailer_fields(H2HeaderBlock& out, const HttpFields& trailers) {
  out.clear();  // its buffers kept (or a gone block's, from the spares)
  for (const auto& f : trailers) {
    const std::string_view name = f.name_string();
    if (name.empty() || name.front() == ':' || is_connection_specific(name) ||
        ascii::iequals(name, "te") || ascii::iequals(name, "host")) {
      continue;
    }
    out.add(name, f.value());  // the name lower-cased
  }
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
