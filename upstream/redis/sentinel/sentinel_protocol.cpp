#include "upstream/redis/sentinel/sentinel_protocol.hpp"

#include <charconv>
#include <vector>

namespace sluice::redis::sentinel {

namespace {

bool is_text(const Reply& reply) {
  return reply.type == Reply::Type::kString || reply.type == Reply::Type::kStatus;
}

// Splits on single spaces; empty fields are kept (and then rejected).
std::vector<std::string_view> split_fields(std::string_view text) {
  std::vector<std::string_view> fields;
  std::size_t start = 0;
  for (;;) {
    const std::size_t space = text.find(' ', start);
    fields.push_back(text.substr(start, space - start));
    if (space == std::string_view::npos) return fields;
    start = space + 1;
  }
}

}  // namespace

std::optional<std::uint16_t> parse_port(std::string_view text) {
  unsigned value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || ptr != end || value == 0 || value > 65535) {
    return std::nullopt;
  }
  return static_cast<std::uint16_t>(value);
}

MasterAnswer parse_master_address(const Reply& reply, Endpoint& address) {
  // RESP2 sends a nil array for an unknown master; some versions a nil bulk.
  if (reply.is_nil()) return MasterAnswer::kUnknownMaster;
  if (reply.type != Reply::Type::kArray || reply.elements.size() != 2) {
    return MasterAnswer::kMalformed;
  }
  const Reply& host = reply.elements[0];
  const Reply& port = reply.elements[1];
  if (!is_text(host) || host.str.empty() || !is_text(port)) return MasterAnswer::kMalformed;
  const auto parsed = parse_port(port.str);
  if (!parsed) return MasterAnswer::kMalformed;
  address = Endpoint{host.str, *parsed};
  return MasterAnswer::kAddress;
}

std::optional<SwitchMaster> parse_switch_master(std::string_view payload) {
  const auto fields = split_fields(payload);
  if (fields.size() != 5) return std::nullopt;
  for (const auto field : fields) {
    if (field.empty()) return std::nullopt;
  }
  const auto from_port = parse_port(fields[2]);
  const auto to_port = parse_port(fields[4]);
  if (!from_port || !to_port) return std::nullopt;
  return SwitchMaster{std::string(fields[0]), Endpoint{std::string(fields[1]), *from_port},
                      Endpoint{std::string(fields[3]), *to_port}};
}

}  // namespace sluice::redis::sentinel
