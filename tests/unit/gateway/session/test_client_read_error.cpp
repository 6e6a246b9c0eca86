// One table for what a failed read from an HTTP/1.1 client means.
#include <catch2/catch.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>

#include "gateway/session/client_read_error.hpp"

using namespace sluice;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace client_read_error_test {

TEST_CASE("client read errors: a client that left is closed quietly", "[session]") {
  for (const ReadPhase phase : {ReadPhase::kHead, ReadPhase::kBody}) {
    CHECK(client_read_error(asio::error::eof, phase).status == 0);
    CHECK(client_read_error(asio::ssl::error::stream_truncated, phase).status == 0);
    CHECK(client_read_error(asio::error::connection_reset, phase).status == 0);
    CHECK(client_read_error(asio::error::operation_aborted, phase).status == 0);
  }
  CHECK(client_read_error(http::error::end_of_stream, ReadPhase::kHead).status == 0);
  CHECK(client_read_error(http::error::partial_message, ReadPhase::kBody).status == 0);
  CHECK(client_read_error(beast::error::timeout, ReadPhase::kBody).status == 0);
}

TEST_CASE("client read errors: limits and malformed input get their status", "[session]") {
  CHECK(client_read_error(http::error::header_limit, ReadPhase::kHead).status == 431);
  CHECK(client_read_error(http::error::buffer_overflow, ReadPhase::kHead).message ==
        "request head too large");
  for (const ReadPhase phase : {ReadPhase::kHead, ReadPhase::kBody}) {
    const ClientReadError too_large = client_read_error(http::error::body_limit, phase);
    CHECK(too_large.status == 413);
    CHECK(too_large.message == "request body too large");
  }
  const ClientReadError chunk = client_read_error(http::error::buffer_overflow, ReadPhase::kBody);
  CHECK(chunk.status == 400);
  CHECK(chunk.message == "chunk-size line or trailer section too long");
  const ClientReadError head = client_read_error(http::error::bad_method, ReadPhase::kHead);
  CHECK(head.status == 400);
  CHECK(head.message.starts_with("malformed request: "));
  const ClientReadError body = client_read_error(http::error::bad_chunk, ReadPhase::kBody);
  CHECK(body.status == 400);
  CHECK(body.message.starts_with("bad request body: "));
  // A body that ended early in the head phase is a malformed head.
  CHECK(client_read_error(http::error::partial_message, ReadPhase::kHead).status == 400);
}

}  // namespace client_read_error_test
