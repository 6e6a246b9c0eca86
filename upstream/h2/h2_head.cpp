#include "upstream/h2/h2_head.hpp"

#include <charconv>

#include "common/ascii.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {
namespace {

using ascii::trim;

// Whether `list` (a Connection header's value) names `name`.
bool names(std::string_view list, std::string_view name) {
  while (!list.empty()) {
    const auto comma = list.find(',');
    if (ascii::iequals(trim(list.substr(0, comma)), name)) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}


}  // namespace

std::optional<H2Fields> h2_request_fields(std::string_view head, std::string_view scheme) {
  auto line_end = head.find("\r\n");
  if (line_end == std::string_view::npos) return std::nullopt;
  const std::string_view request_line = head.substr(0, line_end);
  const auto sp1 = request_line.find(' ');
  const auto sp2 = request_line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1) return std::nullopt;
  const std::string_view method = request_line.substr(0, sp1);
  const std::string_view target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (method.empty() || target.empty()) return std::nullopt;

  std::vector<std::pair<std::string_view, std::string_view>> fields;
  std::string_view rest = head.substr(line_end + 2);
  while (true) {
    line_end = rest.find("\r\n");
    if (line_end == std::string_view::npos) return std::nullopt;  // no blank line
    const std::string_view line = rest.substr(0, line_end);
    rest.remove_prefix(line_end + 2);
    if (line.empty()) break;
    const auto colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return std::nullopt;
    fields.emplace_back(line.substr(0, colon), trim(line.substr(colon + 1)));
  }

  std::string_view authority;
  std::string_view connection;
  bool grpc = false;
  bool te_trailers = false;
  for (const auto& [name, value] : fields) {
    if (ascii::iequals(name, "host")) authority = value;
    if (ascii::iequals(name, "connection")) connection = value;
    if (ascii::iequals(name, "content-type")) {
      grpc = value.size() >= 16 && ascii::iequals(value.substr(0, 16), "application/grpc");
    }
  }
  H2Fields out;
  out.reserve(fields.size() + 5);
  out.emplace_back(":method", std::string(method));
  out.emplace_back(":scheme", std::string(scheme));
  out.emplace_back(":authority", std::string(authority));
  out.emplace_back(":path", std::string(target));
  for (const auto& [name, value] : fields) {
    // Host goes as :authority.
    if (is_connection_specific(name) || ascii::iequals(name, "host") || names(connection, name)) {
      continue;
    }
    if (ascii::iequals(name, "te")) {
      if (!ascii::iequals(value, "trailers") || te_trailers) continue;
      te_trailers = true;
    }
    std::string lower(name);
    ascii::to_lower_in_place(lower);
    out.emplace_back(std::move(lower), std::string(value));
  }
  if (grpc && !te_trailers) out.emplace_back("te", "trailers");
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
