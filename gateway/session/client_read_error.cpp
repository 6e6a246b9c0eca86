#include "gateway/session/client_read_error.hpp"

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>

#include "upstream/byte_stream.hpp"

namespace sluice {

ClientReadError client_read_error(const boost::system::error_code& ec, ReadPhase phase) {
  namespace asio = boost::asio;
  namespace beast = boost::beast;
  namespace http = beast::http;
  const bool head = phase == ReadPhase::kHead;
  if (ec == http::error::body_limit) return {413, "request body too large"};
  if (head && (ec == http::error::header_limit || ec == http::error::buffer_overflow)) {
    return {431, "request head too large"};
  }
  if (!head && ec == http::error::buffer_overflow) {
    return {400, "chunk-size line or trailer section too long"};
  }
  // Gone: it closed (cleanly, or mid-body), reset, or the read was cancelled.
  const bool gone =
      ByteStream::ended(ec) || ec == asio::error::connection_reset ||
      ec == asio::error::operation_aborted ||
      (head ? ec == http::error::end_of_stream || ec == asio::error::broken_pipe
            : ec == beast::error::timeout || ec == http::error::partial_message);
  if (gone) return {};
  return {400, (head ? "malformed request: " : "bad request body: ") + ec.message()};
}

}  // namespace sluice
