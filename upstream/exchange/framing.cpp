#include "upstream/exchange/framing.hpp"

#include <cstdio>

#include <boost/beast/core/string.hpp>

#include "common/ascii.hpp"
#include "upstream/field_scan.hpp"

namespace sluice {
namespace {

namespace http = boost::beast::http;

}  // namespace

std::size_t frame_piece(PieceBuffers& out, std::string_view head, const char* data, std::size_t n,
                        bool chunked, bool last, ChunkPrefix& prefix) {
  namespace asio = boost::asio;
  std::size_t count = 0;
  if (!head.empty()) out[count++] = asio::buffer(head.data(), head.size());
  if (chunked && n > 0) {
    const int len = std::snprintf(prefix.text, sizeof prefix.text, "%zx\r\n", n);
    out[count++] = asio::buffer(prefix.text, static_cast<std::size_t>(len));
  }
  if (n > 0) out[count++] = asio::buffer(data, n);
  if (chunked && n > 0) out[count++] = asio::buffer("\r\n", 2);
  if (chunked && last) out[count++] = asio::buffer("0\r\n\r\n", 5);
  return count;
}

ResponseFraming frame_response(bool has_body, bool has_content_length, bool client_http11) {
  ResponseFraming framing;
  if (has_body && !has_content_length) {
    framing.chunked = client_http11;
    framing.ends_with_close = !client_http11;
  }
  return framing;
}

bool relayable_transfer_coding(const HttpFields& fields) {
  const auto count = count_field(fields, http::field::transfer_encoding);
  if (count == 0) return true;
  return count == 1 && boost::beast::iequals(
                           ascii::trim(field_value(fields, http::field::transfer_encoding)),
                           "chunked");
}

}  // namespace sluice
