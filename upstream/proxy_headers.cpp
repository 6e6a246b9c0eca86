#include "upstream/proxy_headers.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <vector>

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/status.hpp>

#include "common/ascii.hpp"
#include "common/decimal.hpp"
#include "common/hex.hpp"
#include "upstream/field_scan.hpp"
#include "upstream/h2/h2_header_block.hpp"

namespace sluice {
namespace {

namespace http = boost::beast::http;

// The connection-specific fields by Beast's codes (is_connection_specific names the same
// five, by their text).
constexpr std::array<http::field, 5> kConnectionSpecific = {
    http::field::connection,        http::field::keep_alive, http::field::proxy_connection,
    http::field::transfer_encoding, http::field::upgrade,
};

// The other hop-by-hop fields of a request or response over HTTP/1.1.
constexpr std::array<http::field, 4> kAlsoHopByHop = {
    http::field::te,
    http::field::trailer,
    http::field::proxy_authorization,
    http::field::proxy_authenticate,
};

bool is_hop_by_hop(const HttpFields::value_type& f) {
  const auto name = f.name();
  return std::find(kConnectionSpecific.begin(), kConnectionSpecific.end(), name) !=
             kConnectionSpecific.end() ||
         std::find(kAlsoHopByHop.begin(), kAlsoHopByHop.end(), name) != kAlsoHopByHop.end();
}

// Calls fn(token) for each element of the comma-separated lists of every
// `field` line of `fields`.
template <class Fn>
void for_each_token(const HttpFields& fields, http::field field, Fn fn) {
  for_each_field(fields, FieldName(field), [&](std::string_view value) {
    while (!value.empty()) {
      auto comma = value.find(',');
      auto token = ascii::trim(value.substr(0, comma));
      if (!token.empty()) fn(token);
      if (comma == std::string_view::npos) break;
      value.remove_prefix(comma + 1);
    }
  });
}

// The names listed by every Connection header line of `fields`.
std::vector<std::string_view> connection_tokens(const HttpFields& fields) {
  std::vector<std::string_view> listed;
  for_each_token(fields, http::field::connection,
                 [&](std::string_view token) { listed.push_back(token); });
  return listed;
}

bool lists(const HttpFields& fields, http::field field, std::string_view token) {
  bool found = false;
  for_each_token(fields, field, [&](std::string_view t) { found = found || ascii::iequals(t, token); });
  return found;
}

}  // namespace

bool asks_websocket_upgrade(const HttpFields& fields) {
  return lists(fields, http::field::connection, "upgrade") &&
         lists(fields, http::field::upgrade, "websocket");
}

bool grants_websocket_upgrade(const HttpFields& fields) {
  return lists(fields, http::field::upgrade, "websocket");
}

std::size_t erase_underscore_fields(HttpFields& fields) {
  std::size_t erased = 0;
  for (auto it = fields.begin(); it != fields.end();) {
    if (it->name_string().find('_') != boost::beast::string_view::npos) {
      it = fields.erase(it);
      ++erased;
    } else {
      ++it;
    }
  }
  return erased;
}

bool is_connection_specific(std::string_view name) {
  // Told apart by length first: most names (content-type, say) have none of
  // these lengths and are not compared at all.
  switch (name.size()) {
    case 7:
      return ascii::iequals(name, "upgrade");
    case 10:
      return ascii::iequals(name, "connection") || ascii::iequals(name, "keep-alive");
    case 16:
      return ascii::iequals(name, "proxy-connection");
    case 17:
      return ascii::iequals(name, "transfer-encoding");
    default:
      return false;
  }
}

void strip_hop_by_hop(HttpFields& fields) {
  // The usual request has none of them: one pass over its fields instead of
  // a lookup per hop-by-hop name.
  if (std::none_of(fields.begin(), fields.end(),
                   [](const HttpFields::value_type& f) { return is_hop_by_hop(f); })) {
    return;
  }
  // Names listed in Connection go first. They are copied: erasing fields
  // would invalidate views into the Connection values.
  std::vector<std::string> listed;
  for (auto token : connection_tokens(fields)) listed.emplace_back(token);
  for (const auto& name : listed) {
    // Framing and Host are never the client's to hide: a body without its
    // length would be read upstream as a second request (smuggling).
    if (ascii::iequals(name, "Content-Length") || ascii::iequals(name, "Host")) continue;
    fields.erase(name);
  }
  for (auto it = fields.begin(); it != fields.end();) {
    it = is_hop_by_hop(*it) ? fields.erase(it) : std::next(it);
  }
}

namespace {

// Appends `value` to a comma-separated list.
void append_list(std::string& list, std::string_view value) {
  value = ascii::trim(value);
  if (value.empty()) return;
  if (!list.empty()) list.append(", ");
  list.append(value);
}

}  // namespace

bool is_sluice_only(const SluiceOnlyHeaders& only, std::string_view name) {
  return std::any_of(only.begin(), only.end(),
                     [name](std::string_view o) { return !o.empty() && ascii::iequals(name, o); });
}

void append_decodable_codings(std::string& out, std::string_view value) {
  const std::size_t start = out.size();
  bool decodable = false;  // a coding other than identity was kept
  while (!value.empty()) {
    const auto comma = value.find(',');
    const std::string_view item = ascii::trim(value.substr(0, comma));
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
    const std::string_view coding = ascii::trim(item.substr(0, item.find(';')));
    const bool compressed = ascii::iequals(coding, "gzip") || ascii::iequals(coding, "x-gzip") ||
                            ascii::iequals(coding, "deflate");
    if (compressed || ascii::iequals(coding, "identity")) {
      if (out.size() > start) out += ", ";
      out += item;
      decodable = decodable || compressed;
    }
  }
  // Identity alone (even refused, "identity;q=0"): plain identity, which a
  // server may always send.
  if (!decodable) {
    out.resize(start);
    out += "identity";
  }
}

void prepare_request_head(UpstreamHead& head, std::string_view method, std::string_view target,
                          const HttpFields& fields, const ForwardedInfo& info, bool chunked,
                          std::optional<std::uint64_t> content_length) {
  head.clear();
  head.take_spares(target.size());
  head.method = method;
  head.target_text.assign(target);
  head.target = head.target_text;
  for (const auto& f : fields) {
    const auto name = f.name();
    const std::string_view name_string = f.name_string();
    head.has_host = head.has_host || name == http::field::host;
    if (name == http::field::via) {
      append_list(head.via, f.value());
    } else if (name == http::field::expect || name == http::field::transfer_encoding ||
               name == http::field::content_length) {
      // Expect is answered by Sluice itself; framing is redone below.
    } else if (name == http::field::unknown && ascii::iequals(name_string, "X-Forwarded-For")) {
      append_list(head.forwarded_for, f.value());
    } else if (name == http::field::unknown && (ascii::iequals(name_string, "X-Forwarded-Proto") ||
                                                ascii::iequals(name_string, "X-Forwarded-Host") ||
                                                ascii::iequals(name_string, "X-Request-Id") ||
                                                ascii::iequals(name_string, "X-Consumer-Id") ||
                                                ascii::iequals(name_string, "X-Consumer-Plan"))) {
      // Replaced below (the consumer's headers only Sluice may send).
    } else if (is_sluice_only(info.drop_headers, name_string) ||
               std::any_of(info.drop_also.begin(), info.drop_also.end(),
                           [&](const std::string& n) { return ascii::iequals(n, name_string); })) {
      // A route's cost header, or a client's copy of its usage header.
    } else if (info.rules && info.rules->drops(name_string)) {
      // Set below or removed by the route's rules.
    } else if (info.decodable_codings_only && name == http::field::accept_encoding &&
               !(info.rules && info.rules->drops("Accept-Encoding"))) {
      append_list(head.accept_encoding, f.value());  // filtered below
    } else {
      head.fields.emplace_back(name_string, f.value());
    }
  }
  // (A route rule that sets or removes Accept-Encoding decides it instead.)
  if (info.decodable_codings_only && !(info.rules && info.rules->drops("Accept-Encoding"))) {
    // Never empty: "identity" when the client named no coding Sluice decodes.
    const std::string asked = std::move(head.accept_encoding);
    head.accept_encoding.clear();
    append_decodable_codings(head.accept_encoding, asked);
    head.fields.emplace_back("Accept-Encoding", head.accept_encoding);
  }
  head.host_at = head.fields.size();
  append_list(head.forwarded_for, info.client_ip);
  head.fields.emplace_back("X-Forwarded-For", head.forwarded_for);
  head.fields.emplace_back("X-Forwarded-Proto", info.proto);
  if (!info.host.empty()) head.fields.emplace_back("X-Forwarded-Host", info.host);
  head.fields.emplace_back("X-Request-Id", info.request_id);
  append_list(head.via, "1.1 sluice");
  head.fields.emplace_back("Via", head.via);
  if (info.websocket) {
    head.fields.emplace_back("Connection", "Upgrade");
    head.fields.emplace_back("Upgrade", "websocket");
  }
  if (!info.traceparent.empty()) head.fields.emplace_back("traceparent", info.traceparent);
  for (const auto& [name, value] : info.identity) head.fields.emplace_back(name, value);
  if (info.rules) {
    // Sized first: the views below point into these strings.
    const auto& sets = info.rules->sets();
    head.rule_values.resize(sets.size());
    for (std::size_t i = 0; i < sets.size(); ++i) {
      head.rule_values[i].clear();
      sets[i].value.append_to(head.rule_values[i], info.vars);
      head.fields.emplace_back(sets[i].name, head.rule_values[i]);
    }
  }
  head.chunked = chunked;
  head.content_length = chunked ? std::nullopt : content_length;
}

void serialize_request_head(std::string& out, std::string_view method, std::string_view target,
                            const HttpFields& fields, const ForwardedInfo& info, bool chunked,
                            std::optional<std::uint64_t> content_length) {
  UpstreamHead head;
  prepare_request_head(head, method, target, fields, info, chunked, content_length);
  write_http1_head(out, head, info.upstream_host);
}

namespace {

// The response fields a client gets, whatever its protocol: the upstream
// fields minus hop-by-hop ones (and the names Connection lists), minus
// Content-Length (framing), X-Request-Id, the names in `extra` and the names
// the rules set or remove; then `extra` and X-Request-Id. emit(name, value).
template <class Emit>
void each_response_field(const HttpFields& fields, const ResponseHeadOptions& options,
                         Emit&& emit) {
  const auto listed = connection_tokens(fields);
  for (const auto& f : fields) {
    if (is_hop_by_hop(f) || f.name() == http::field::content_length) continue;
    const std::string_view name = f.name_string();
    bool skip = ascii::iequals(name, "X-Request-Id");
    for (auto l : listed) skip = skip || ascii::iequals(name, l);
    // A step's line replaces the upstream's of its name; Vary lists add up.
    for (const auto& e : options.extra) {
      skip = skip || (ascii::iequals(name, e.first) && !ascii::iequals(name, "Vary"));
    }
    skip = skip || (options.rules && options.rules->drops(name));
    if (!skip) emit(name, f.value());
  }
  for (const auto& [name, value] : options.extra) emit(name, value);
  emit("X-Request-Id", options.request_id);
}

}  // namespace

void serialize_response_head(std::string& out, unsigned status, std::string_view reason,
                             const HttpFields& fields, const ResponseHeadOptions& options) {
  using namespace std::string_view_literals;
  out.assign("HTTP/1.1 "sv);
  append_decimal(out, std::uint64_t{status});
  out += ' ';
  out.append(reason.empty()
                 ? std::string_view{http::obsolete_reason(static_cast<http::status>(status))}
                 : reason);
  out.append("\r\n"sv);
  each_response_field(fields, options, [&out](std::string_view name, std::string_view value) {
    append_http1_field(out, name, value);
  });
  if (options.rules) options.rules->append_set(out, options.vars);
  if (options.websocket) {
    out.append("Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n"sv);
    return;
  }
  if (options.chunked) {
    out.append("Transfer-Encoding: chunked\r\n"sv);
  } else if (options.content_length) {
    out.append("Content-Length: "sv);
    append_decimal(out, *options.content_length);
    out.append("\r\n"sv);
  }
  if (!options.keep_alive) {
    out.append("Connection: close\r\n"sv);
  } else if (options.announce_keep_alive) {
    out.append("Connection: keep-alive\r\n"sv);
  }
  out.append("\r\n"sv);
}

void response_fields(H2HeaderBlock& out, const HttpFields& fields,
                     const ResponseHeadOptions& options) {
  out.clear();
  const auto add = [&out](std::string_view name, std::string_view value) { out.add(name, value); };
  each_response_field(fields, options, add);
  if (options.rules) {
    std::string value;
    for (const auto& set : options.rules->sets()) {
      value.clear();
      set.value.append_to(value, options.vars);
      add(set.name, value);
    }
  }
  if (options.content_length) {
    char digits[20];  // the most digits of a 64-bit number
    const std::size_t n = decimal_digits(*options.content_length);
    put_decimal_before(digits + n, *options.content_length);
    add("content-length", std::string_view(digits, n));
  }
}

bool is_acceptable_request_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (unsigned char c : id) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

void generate_request_id(std::string& out) {
  char id[32];
  generate_request_id(id);
  out.assign(id, sizeof id);
}

void generate_request_id(char (&out)[32]) {
  // One generator per thread, seeded from the OS: SplitMix64, whose draws
  // pass BigCrush, at a few instructions each. An id must be unique, not
  // secret (nothing is keyed, signed or authorized by one): like any
  // non-cryptographic generator, it can be predicted from what it drew.
  thread_local std::uint64_t state = [] {
    std::random_device rd;
    return (std::uint64_t{rd()} << 32) ^ rd();
  }();
  const auto rng = [] {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  // Each half of a draw's bits as eight lower-case hex digits, the lowest
  // nibble first, in a few word operations: every nibble spread to a byte of
  // its own, then '0' added, and 'a' - '0' - 10 more where it is 10 or above.
  const auto digits = [](std::uint32_t half, char* p) {
    std::uint64_t x = half;
    x = (x | (x << 16)) & 0x0000ffff0000ffffULL;
    x = (x | (x << 8)) & 0x00ff00ff00ff00ffULL;
    x = (x | (x << 4)) & 0x0f0f0f0f0f0f0f0fULL;
    const std::uint64_t letters = ((x + 0x0606060606060606ULL) >> 4) & 0x0101010101010101ULL;
    x += 0x3030303030303030ULL + letters * ('a' - '0' - 10);
    std::memcpy(p, &x, 8);  // little-endian: the lowest nibble's byte first
  };
  for (int i = 0; i < 2; ++i) {
    const std::uint64_t v = rng();
    digits(static_cast<std::uint32_t>(v), out + 16 * i);
    digits(static_cast<std::uint32_t>(v >> 32), out + 16 * i + 8);
  }
}

std::string generate_request_id() {
  std::string id;
  generate_request_id(id);
  return id;
}

}  // namespace sluice
