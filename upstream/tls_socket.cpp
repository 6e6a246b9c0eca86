#include "upstream/tls_socket.hpp"

#include <cerrno>
#include <new>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <boost/asio/ssl/error.hpp>

namespace sluice {

namespace asio = boost::asio;

namespace {

// SSL_get_error reads the thread's OpenSSL error queue, so the queue must be
// empty before each operation. ERR_clear_error goes over every slot of the
// queue (about 800 instructions) even when it is empty, which it nearly
// always is, twice a request; looking first costs a tenth of that.
// ERR_peek_error finds what SSL_get_error would.
void clear_errors() {
  if (ERR_peek_error() != 0) ERR_clear_error();
}

}  // namespace

TlsSocket::TlsSocket(int descriptor, SSL_CTX* context, Role role) : ssl_(SSL_new(context)) {
  if (!ssl_) throw std::bad_alloc();
  // The BIO does not close the descriptor: the socket's owner does.
  if (SSL_set_fd(ssl_, descriptor) != 1) {
    SSL_free(ssl_);
    throw std::bad_alloc();
  }
  if (role == Role::kServer) {
    SSL_set_accept_state(ssl_);
  } else {
    SSL_set_connect_state(ssl_);
  }
  // A write may end after a whole record (the caller goes on from there) and
  // be repeated from another address; buffers go back to OpenSSL's free list
  // while the connection idles (an idle keep-alive connection keeps none).
  SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                         SSL_MODE_RELEASE_BUFFERS);
  // Whole records and what follows them in one read, not a header then a body.
  SSL_set_read_ahead(ssl_, 1);
  // A peer's end without close_notify reads as an end (HTTP framing tells a
  // complete message from a cut one), not as a fatal error that would send
  // the peer a decode_error alert on a socket whose reading side a tunnel
  // shut down, and refuse our close_notify afterwards.
  SSL_set_options(ssl_, SSL_OP_IGNORE_UNEXPECTED_EOF);
}

TlsSocket::~TlsSocket() {
  SSL_free(ssl_);
}

TlsSocket::Attempt TlsSocket::attempt_handshake() {
  clear_errors();
  const int result = SSL_do_handshake(ssl_);
  if (result == 1) return {};
  return failed(result, errno);
}

TlsSocket::Attempt TlsSocket::attempt_read(asio::mutable_buffer buffer) {
  if (buffer.size() == 0) return {};
  clear_errors();
  std::size_t n = 0;
  const int result = SSL_read_ex(ssl_, buffer.data(), buffer.size(), &n);
  return transferred(result, n, errno);
}

TlsSocket::Attempt TlsSocket::attempt_write(asio::const_buffer buffer) {
  if (buffer.size() == 0) return {};
  clear_errors();
  std::size_t n = 0;
  const int result = SSL_write_ex(ssl_, buffer.data(), buffer.size(), &n);
  return transferred(result, n, errno);
}

TlsSocket::Attempt TlsSocket::attempt_peek() {
  clear_errors();
  char byte;
  std::size_t n = 0;
  const int result = SSL_peek_ex(ssl_, &byte, 1, &n);
  return transferred(result, n, errno);
}

TlsSocket::Attempt TlsSocket::transferred(int result, std::size_t n, int saved_errno) {
  if (result == 1) return {Want::kNothing, n, {}};
  return failed(result, saved_errno);
}

// close_notify out, then the peer's in: 1 once both have passed. A 0 from
// the first call (ours sent) asks for the second at once, which reads.
TlsSocket::Attempt TlsSocket::attempt_shutdown() {
  clear_errors();
  int result = SSL_shutdown(ssl_);
  if (result == 0) result = SSL_shutdown(ssl_);
  if (result == 1) return {};
  return failed(result, errno);
}

void TlsSocket::send_close_notify() {
  // Only TLS 1.3 lets a side go on reading after its close_notify; under
  // TLS 1.2 the peer would answer with its own and drop what it still had
  // to send, so there the TCP half-close alone ends the stream.
  if (SSL_version(ssl_) != TLS1_3_VERSION) return;
  ERR_clear_error();
  SSL_shutdown(ssl_);  // 0: sent; -1 (the socket full): the peer sees a plain end instead
  ERR_clear_error();
}

// The error codes Asio's ssl::stream gives for the same ends, so callers
// tell them apart the same way: a close_notify is eof, an end without one
// stream_truncated, a socket error its errno, a protocol error OpenSSL's code.
TlsSocket::Attempt TlsSocket::failed(int result, int saved_errno) {
  const int error = SSL_get_error(ssl_, result);
  switch (error) {
    case SSL_ERROR_WANT_READ:
      return {Want::kRead, 0, {}};
    case SSL_ERROR_WANT_WRITE:
      return {Want::kWrite, 0, {}};
    case SSL_ERROR_ZERO_RETURN:
      return {Want::kNothing, 0, asio::error::eof};
    case SSL_ERROR_SYSCALL:
      if (ERR_peek_error() == 0) {
        if (saved_errno == 0) return {Want::kNothing, 0, asio::ssl::error::stream_truncated};
        return {Want::kNothing, 0, {saved_errno, boost::system::system_category()}};
      }
      break;
    default:
      break;
  }
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (ERR_SYSTEM_ERROR(code)) {  // a socket error OpenSSL queued: its errno
    return {Want::kNothing,
            0,
            {static_cast<int>(ERR_GET_REASON(code)), boost::system::system_category()}};
  }
  if (ERR_GET_LIB(code) == ERR_LIB_SSL &&
      ERR_GET_REASON(code) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
    return {Want::kNothing, 0, asio::ssl::error::stream_truncated};
  }
  if (code == 0) return {Want::kNothing, 0, asio::error::fault};
  return {Want::kNothing, 0, {static_cast<int>(code), asio::error::get_ssl_category()}};
}

}  // namespace sluice
