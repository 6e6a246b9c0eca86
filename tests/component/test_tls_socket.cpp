// TlsSocket over real loopback sockets, against Asio's own TLS client: the
// handshake, data both ways (gathered writes, large writes, a read and a write
// pending at once), completions that never run inside the initiating call,
// how each kind of end reads (close_notify, a bare TCP close, a reset, a
// protocol error), and an operation on a closed socket.
#include <catch2/catch.hpp>

#include <array>
#include <csignal>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>

#include "support/io_loop.hpp"
#include "upstream/tls_socket.hpp"

namespace asio = boost::asio;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using namespace sluice;

namespace {

// A server context with a fresh self-signed P-256 certificate for "test".
std::unique_ptr<ssl::context> server_context() {
  auto context = std::make_unique<ssl::context>(ssl::context::tls_server);
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("test"), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  X509_sign(cert, key, EVP_sha256());
  SSL_CTX_use_certificate(context->native_handle(), cert);
  SSL_CTX_use_PrivateKey(context->native_handle(), key);
  X509_free(cert);
  EVP_PKEY_free(key);
  return context;
}

using Server = TlsStreamOps<tcp::socket>;

// A connected pair: TlsSocket on the server end, Asio's ssl::stream (not
// verifying) on the client end.
struct Pair {
  test::Loop loop;
  std::unique_ptr<ssl::context> context = server_context();
  ssl::context client_context{ssl::context::tls_client};
  tcp::socket server_socket{loop.io};
  std::optional<TlsSocket> tls;
  std::optional<Server> server;
  ssl::stream<tcp::socket> client{loop.io, client_context};

  Pair() {
    std::signal(SIGPIPE, SIG_IGN);  // OpenSSL writes the socket itself
    tcp::acceptor acceptor(loop.io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    client.next_layer().connect(acceptor.local_endpoint());
    acceptor.accept(server_socket);
    server_socket.non_blocking(true);
    tls.emplace(server_socket.native_handle(), context->native_handle());
    server.emplace(server_socket, *tls);
  }

  void handshake() {
    std::optional<error_code> server_done, client_done;
    server->async_handshake([&](error_code ec) { server_done = ec; });
    client.async_handshake(ssl::stream_base::client, [&](error_code ec) { client_done = ec; });
    REQUIRE(loop.run_until([&] { return server_done && client_done; }));
    REQUIRE_FALSE(*server_done);
    REQUIRE_FALSE(*client_done);
  }

  // Reads on the server until `n` bytes or an error; returns what came.
  std::string server_read(std::size_t n, error_code& ec) {
    std::string got;
    std::array<char, 4096> piece;
    bool pending = false;
    ec = {};
    while (got.size() < n && !ec) {
      if (!pending) {
        pending = true;
        server->async_read_some(asio::buffer(piece), [&](error_code e, std::size_t k) {
          pending = false;
          ec = e;
          got.append(piece.data(), k);
        });
      }
      if (!loop.run_until([&] { return !pending; })) break;
    }
    return got;
  }
};

}  // namespace

TEST_CASE("TlsSocket: a handshake, then data both ways", "[tls_socket]") {
  Pair p;
  p.handshake();
  CHECK(SSL_is_init_finished(p.tls->native_handle()) == 1);

  asio::write(p.client, asio::buffer(std::string("hello, server")));
  error_code ec;
  CHECK(p.server_read(13, ec) == "hello, server");
  CHECK_FALSE(ec);

  // Head and body pieces in one write: gathered, and all of them arrive.
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n";
  const std::array<asio::const_buffer, 2> pieces{asio::buffer(head), asio::buffer("body", 4)};
  std::optional<std::size_t> written;
  asio::async_write(*p.server, pieces, [&](error_code e, std::size_t n) {
    REQUIRE_FALSE(e);
    written = n;
  });
  REQUIRE(p.loop.run_until([&] { return written.has_value(); }));
  CHECK(*written == head.size() + 4);
  std::string echoed(head.size() + 4, '\0');
  asio::read(p.client, asio::buffer(echoed));
  CHECK(echoed == head + "body");
}

TEST_CASE("TlsSocket: a large write goes out while a read is pending", "[tls_socket]") {
  Pair p;
  p.handshake();
  // A read waits on the server while it writes 4 MiB, more than the socket
  // buffers hold: the write waits for the client to read, the read for data.
  std::array<char, 64> piece;
  std::optional<std::size_t> read_n;
  p.server->async_read_some(asio::buffer(piece), [&](error_code e, std::size_t n) {
    REQUIRE_FALSE(e);
    read_n = n;
  });
  const std::string big(4 * 1024 * 1024, 'x');
  std::optional<std::size_t> written;
  asio::async_write(*p.server, asio::buffer(big), [&](error_code e, std::size_t n) {
    REQUIRE_FALSE(e);
    written = n;
  });
  std::string received(big.size(), '\0');
  std::optional<std::size_t> client_read;
  asio::async_read(p.client, asio::buffer(received), [&](error_code e, std::size_t n) {
    REQUIRE_FALSE(e);
    client_read = n;
  });
  REQUIRE(p.loop.run_until([&] { return written && client_read; }));
  CHECK(received == big);
  CHECK_FALSE(read_n.has_value());
  asio::write(p.client, asio::buffer(std::string("ok")));
  REQUIRE(p.loop.run_until([&] { return read_n.has_value(); }));
  CHECK(std::string(piece.data(), *read_n) == "ok");
}

TEST_CASE("TlsSocket: completions never run inside the initiating call", "[tls_socket]") {
  Pair p;
  p.handshake();
  asio::write(p.client, asio::buffer(std::string("ready")));
  // Let the bytes arrive, so that the read can complete at once.
  REQUIRE(p.loop.run_until([&] { return p.server_socket.available() > 0; }));
  std::array<char, 16> piece;
  bool done = false;
  p.server->async_read_some(asio::buffer(piece), [&](error_code e, std::size_t n) {
    CHECK_FALSE(e);
    CHECK(std::string(piece.data(), n) == "ready");
    done = true;
  });
  CHECK_FALSE(done);
  REQUIRE(p.loop.run_until([&] { return done; }));
}

TEST_CASE("TlsSocket: how the ends read", "[tls_socket]") {
  Pair p;
  p.handshake();
  error_code ec;

  SECTION("the client's close_notify is end of stream, and ours answers it") {
    std::optional<error_code> client_end;
    p.client.async_shutdown([&](error_code e) { client_end = e; });
    p.server_read(1, ec);
    CHECK(ec == asio::error::eof);
    std::optional<error_code> server_end;
    p.server->async_shutdown([&](error_code e) { server_end = e; });
    REQUIRE(p.loop.run_until([&] { return server_end && client_end; }));
    CHECK_FALSE(*server_end);
    CHECK_FALSE(*client_end);
  }
  SECTION("a TCP close without close_notify is an end too, with no alert sent") {
    p.client.next_layer().shutdown(tcp::socket::shutdown_send);
    p.server_read(1, ec);
    CHECK(ec == asio::error::eof);
    // Our close_notify still goes out, and the client reads it as a clean end.
    std::optional<error_code> server_end;
    p.server->async_shutdown([&](error_code e) { server_end = e; });
    REQUIRE(p.loop.run_until([&] { return server_end.has_value(); }));
    CHECK_FALSE(*server_end);
    std::array<char, 8> piece;
    error_code client_ec;
    p.client.read_some(asio::buffer(piece), client_ec);
    CHECK(client_ec == asio::error::eof);
  }
  SECTION("a reset is the socket's error") {
    p.client.next_layer().set_option(asio::socket_base::linger(true, 0));
    p.client.next_layer().close();
    p.server_read(1, ec);
    CHECK(ec == asio::error::connection_reset);
  }
  SECTION("an operation after the socket closed fails without touching it") {
    p.server_socket.close();
    std::array<char, 8> piece;
    std::optional<error_code> read_end;
    p.server->async_read_some(asio::buffer(piece),
                              [&](error_code e, std::size_t) { read_end = e; });
    REQUIRE(p.loop.run_until([&] { return read_end.has_value(); }));
    CHECK(*read_end == asio::error::bad_descriptor);
  }
  SECTION("closing the socket ends a pending read") {
    std::array<char, 8> piece;
    std::optional<error_code> read_end;
    p.server->async_read_some(asio::buffer(piece),
                              [&](error_code e, std::size_t) { read_end = e; });
    p.loop.io.poll();
    CHECK_FALSE(read_end.has_value());
    p.server_socket.close();
    REQUIRE(p.loop.run_until([&] { return read_end.has_value(); }));
    CHECK(*read_end == asio::error::operation_aborted);
  }
}

TEST_CASE("TlsSocket: plain HTTP where a handshake was due is a protocol error", "[tls_socket]") {
  Pair p;
  asio::write(p.client.next_layer(),
              asio::buffer(std::string("GET / HTTP/1.1\r\nHost: x\r\n\r\n")));
  std::optional<error_code> handshake_end;
  p.server->async_handshake([&](error_code e) { handshake_end = e; });
  REQUIRE(p.loop.run_until([&] { return handshake_end.has_value(); }));
  CHECK(*handshake_end);
  CHECK(handshake_end->category() == asio::error::get_ssl_category());
}

TEST_CASE("TlsSocket: an error left on the thread's OpenSSL queue taints no read or write",
          "[tls_socket]") {
  Pair p;
  p.handshake();
  // Another OpenSSL user on this thread (a certificate check, a hash) left an
  // error behind: a read that must wait would read as that error if the
  // queue were not emptied first.
  ERR_raise(ERR_LIB_SSL, SSL_R_BAD_PACKET);
  std::array<char, 16> piece;
  std::optional<error_code> read_ec;
  std::size_t read_n = 0;
  p.server->async_read_some(asio::buffer(piece), [&](error_code e, std::size_t n) {
    read_ec = e;
    read_n = n;
  });
  ERR_raise(ERR_LIB_SSL, SSL_R_BAD_PACKET);
  asio::write(p.client, asio::buffer(std::string("after")));
  REQUIRE(p.loop.run_until([&] { return read_ec.has_value(); }));
  CHECK_FALSE(*read_ec);
  CHECK(std::string(piece.data(), read_n) == "after");

  ERR_raise(ERR_LIB_SSL, SSL_R_BAD_PACKET);
  std::optional<error_code> write_ec;
  asio::async_write(*p.server, asio::buffer(std::string("back")),
                    [&](error_code e, std::size_t) { write_ec = e; });
  REQUIRE(p.loop.run_until([&] { return write_ec.has_value(); }));
  CHECK_FALSE(*write_ec);
  std::string echoed(4, '\0');
  asio::read(p.client, asio::buffer(echoed));
  CHECK(echoed == "back");
  CHECK(ERR_peek_error() == 0);
}
