#include "upstream/request_head.hpp"

#include <algorithm>

#include "common/ascii.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {
namespace {

bool is_grpc(std::string_view content_type) {
  return content_type.size() >= 16 && ascii::iequals(content_type.substr(0, 16), "application/grpc");
}

}  // namespace

void append_http1_field(std::string& out, std::string_view name, std::string_view value) {
  // Sized once, then copied in pieces: every field of every head goes through here.
  const std::size_t at = out.size();
  out.resize(at + name.size() + value.size() + 4);
  char* p = out.data() + at;
  p = std::copy(name.begin(), name.end(), p);
  *p++ = ':';
  *p++ = ' ';
  p = std::copy(value.begin(), value.end(), p);
  *p++ = '\r';
  *p = '\n';
}

void UpstreamHead::clear() {
  method = {};
  target = {};
  fields.clear();
  has_host = false;
  host_at = 0;
  chunked = false;
  content_length.reset();
  target_text.clear();
  forwarded_for.clear();
  via.clear();
}

void write_http1_head(std::string& out, const UpstreamHead& head, std::string_view upstream_host) {
  out.clear();
  out.append(head.method).append(" ").append(head.target).append(" HTTP/1.1\r\n");
  for (std::size_t i = 0; i <= head.fields.size(); ++i) {
    if (i == head.host_at && !head.has_host && !upstream_host.empty()) {
      append_http1_field(out, "Host", upstream_host);
    }
    if (i < head.fields.size()) append_http1_field(out, head.fields[i].first, head.fields[i].second);
  }
  if (head.chunked) {
    out.append("Transfer-Encoding: chunked\r\n");
  } else if (head.content_length) {
    append_http1_field(out, "Content-Length", std::to_string(*head.content_length));
  }
  out.append("\r\n");
}

void write_h2_head(H2Fields& out, const UpstreamHead& head, std::string_view scheme,
                   std::string_view upstream_host) {
  std::string_view authority = head.has_host ? std::string_view{} : upstream_host;
  bool grpc = false;
  for (const auto& [name, value] : head.fields) {
    if (ascii::iequals(name, "host")) authority = ascii::trim(value);
    if (ascii::iequals(name, "content-type")) grpc = is_grpc(ascii::trim(value));
  }
  out.clear();
  out.reserve(head.fields.size() + 6);
  out.emplace_back(":method", std::string(head.method));
  out.emplace_back(":scheme", std::string(scheme));
  out.emplace_back(":authority", std::string(authority));
  out.emplace_back(":path", std::string(head.target));
  bool te_trailers = false;
  for (const auto& [name, raw] : head.fields) {
    // Host goes as :authority.
    if (is_connection_specific(name) || ascii::iequals(name, "host")) continue;
    const std::string_view value = ascii::trim(raw);
    if (ascii::iequals(name, "te")) {
      if (!ascii::iequals(value, "trailers") || te_trailers) continue;
      te_trailers = true;
    }
    std::string lower(name);
    ascii::to_lower_in_place(lower);
    out.emplace_back(std::move(lower), std::string(value));
  }
  if (!head.chunked && head.content_length) {
    out.emplace_back("content-length", std::to_string(*head.content_length));
  }
  if (grpc && !te_trailers) out.emplace_back("te", "trailers");
}

}  // namespace sluice
