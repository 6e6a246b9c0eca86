#include "upstream/request_head.hpp"

#include <algorithm>
#include <cassert>
#include <charconv>

#include "common/ascii.hpp"
#include "common/decimal.hpp"
#include "common/spares.hpp"
#include "upstream/h2/h2_header_block.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {
namespace {

bool is_grpc(std::string_view content_type) {
  return content_type.size() >= 16 && ascii::iequals(content_type.substr(0, 16), "application/grpc");
}

char* put(char* p, std::string_view text) { return std::copy(text.begin(), text.end(), p); }

// "name: value\r\n" at p; returns its end.
char* put_field(char* p, std::string_view name, std::string_view value) {
  p = put(p, name);
  *p++ = ':';
  *p++ = ' ';
  p = put(p, value);
  *p++ = '\r';
  *p++ = '\n';
  return p;
}

}  // namespace

void append_http1_field(std::string& out, std::string_view name, std::string_view value) {
  // Sized once, then written in place: every field of every head goes through here.
  const std::size_t at = out.size();
  out.resize(at + name.size() + value.size() + 4);
  put_field(out.data() + at, name, value);
}

UpstreamHead::~UpstreamHead() {
  Spares<std::vector<Field>>::give(std::move(fields));
  Spares<std::string>::give(std::move(target_text));
}

void UpstreamHead::take_spares(std::size_t target_size) {
  if (fields.capacity() == 0) fields = Spares<std::vector<Field>>::take();
  if (target_size > target_text.capacity()) target_text = Spares<std::string>::take();
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
  accept_encoding.clear();
}

void write_http1_head(std::string& out, const UpstreamHead& head, std::string_view upstream_host) {
  // Measured first, then sized once and written through a pointer: a resize
  // per piece cost more than the copying (the capacity stays for the next head).
  constexpr std::string_view kVersion = " HTTP/1.1\r\n";
  constexpr std::string_view kChunked = "Transfer-Encoding: chunked\r\n";
  constexpr std::string_view kContentLength = "Content-Length";
  char digits[20];
  char* const digits_end = digits + sizeof digits;
  const char* length_at = digits_end;
  if (!head.chunked && head.content_length) {
    length_at = put_decimal_before(digits_end, *head.content_length);
  }
  const std::string_view length(length_at, static_cast<std::size_t>(digits_end - length_at));
  const bool add_host =
      !head.has_host && !upstream_host.empty() && head.host_at <= head.fields.size();
  std::size_t size = head.method.size() + 1 + head.target.size() + kVersion.size() + 2;
  for (const auto& [name, value] : head.fields) size += name.size() + value.size() + 4;
  if (add_host) size += 4 + upstream_host.size() + 4;
  if (head.chunked) size += kChunked.size();
  if (!length.empty()) size += kContentLength.size() + length.size() + 4;

  out.resize(size);
  char* p = out.data();
  p = put(p, head.method);
  *p++ = ' ';
  p = put(p, head.target);
  p = put(p, kVersion);
  for (std::size_t i = 0; i <= head.fields.size(); ++i) {
    if (i == head.host_at && add_host) p = put_field(p, "Host", upstream_host);
    if (i < head.fields.size()) p = put_field(p, head.fields[i].first, head.fields[i].second);
  }
  if (head.chunked) p = put(p, kChunked);
  if (!length.empty()) p = put_field(p, kContentLength, length);
  *p++ = '\r';
  *p++ = '\n';
  assert(p == out.data() + out.size());
}

void write_h2_head(H2HeaderBlock& out, const UpstreamHead& head, std::string_view scheme,
                   std::string_view upstream_host) {
  std::string_view authority = head.has_host ? std::string_view{} : upstream_host;
  bool grpc = false;
  for (const auto& [name, value] : head.fields) {
    if (ascii::iequals(name, "host")) authority = ascii::trim(value);
    if (ascii::iequals(name, "content-type")) grpc = is_grpc(ascii::trim(value));
  }
  out.clear();
  std::size_t bytes = head.method.size() + scheme.size() + authority.size() + head.target.size();
  for (const auto& [name, value] : head.fields) bytes += name.size() + value.size();
  out.reserve(bytes + 64, head.fields.size() + 7);
  out.add(":method", head.method);
  out.add(":scheme", scheme);
  out.add(":authority", authority);
  out.add(":path", head.target);
  bool te_trailers = false;
  for (const auto& [name, raw] : head.fields) {
    // Host goes as :authority.
    if (is_connection_specific(name) || ascii::iequals(name, "host")) continue;
    const std::string_view value = ascii::trim(raw);
    if (ascii::iequals(name, "te")) {
      if (!ascii::iequals(value, "trailers") || te_trailers) continue;
      te_trailers = true;
    }
    out.add(name, value);  // the name lower-cased
  }
  if (!head.chunked && head.content_length) {
    char digits[20];
    const auto end = std::to_chars(digits, digits + sizeof digits, *head.content_length).ptr;
    out.add("content-length", std::string_view(digits, end - digits));
  }
  if (grpc && !te_trailers) out.add("te", "trailers");
}

}  // namespace sluice
