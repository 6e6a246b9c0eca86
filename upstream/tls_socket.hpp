// One TLS connection, server or client side, driven by the socket's readiness:
// OpenSSL reads and writes the socket itself (a socket BIO, as nginx does) and
// the reactor only says when the socket can be read or written again. Asio's
// ssl::stream instead moves every record through a pair of memory BIOs and its
// own buffers, a copy and a layer of composed operations per record each way.
//
// Operations complete on the socket's executor (the worker's), never inside
// the call that starts them. One read and one write may be pending at once
// (full duplex, as a WebSocket tunnel needs); handshake and shutdown run
// alone. An operation started after the socket was closed fails with
// bad_descriptor without touching the descriptor number, which another
// connection may already hold.
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/asio/async_result.hpp>
#include <boost/asio/basic_stream_socket.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>

using SSL = struct ssl_st;
using SSL_CTX = struct ssl_ctx_st;

namespace sluice {

class TlsSocket {
 public:
  // What one attempt needs before it can go on, or how it ended.
  enum class Want { kNothing, kRead, kWrite };
  struct Attempt {
    Want want = Want::kNothing;
    std::size_t bytes = 0;
    boost::system::error_code ec;
  };
  // The largest write gathered into one record from several buffers.
  static constexpr std::size_t kGatherBytes = 16 * 1024;

  enum class Role { kServer, kClient };

  // A connection on the socket `descriptor` (whose owner keeps it open while
  // attempts are made) with `context`: a server's starts with the context's
  // certificate (SNI may switch it), a client's sends its hello on the first
  // handshake attempt. Throws std::bad_alloc when OpenSSL has no memory.
  TlsSocket(int descriptor, SSL_CTX* context, Role role = Role::kServer);
  ~TlsSocket();
  TlsSocket(const TlsSocket&) = delete;
  TlsSocket& operator=(const TlsSocket&) = delete;

  SSL* native_handle() { return ssl_; }

  // The attempts behind TlsStreamOps: each makes one OpenSSL call (two for a
  // shutdown) on the non-blocking socket; never call one on a closed socket.
  Attempt attempt_handshake();
  Attempt attempt_read(boost::asio::mutable_buffer buffer);
  Attempt attempt_write(boost::asio::const_buffer buffer);
  Attempt attempt_shutdown();
  // Sends close_notify once, without waiting for the peer's (a half-close;
  // TLS 1.3 only: under TLS 1.2 it would end the peer's sending too).
  void send_close_notify();
  // Whether the peer sent anything: a byte of data (bytes 1, left to read),
  // its end (eof) or an error, or nothing yet (kRead).
  Attempt attempt_peek();

  // The gathered copy of a write of several small buffers: one record, one
  // system call. Kept while the write is pending (a retry repeats it).
  std::vector<char>& gathered() { return gathered_; }

 private:
  // The outcome of an *_ex call that moved `n` bytes when `result` is 1.
  Attempt transferred(int result, std::size_t n, int saved_errno);
  Attempt failed(int result, int saved_errno);

  SSL* ssl_ = nullptr;
  std::vector<char> gathered_;
};

// The asynchronous operations of a TlsSocket over `Socket` (an Asio stream
// socket): each runs its attempt, waits for the readiness the attempt asks
// for, and tries again, until the attempt completes or fails.
template <class Socket>
class TlsStreamOps {
 public:
  using executor_type = typename Socket::executor_type;

  TlsStreamOps(Socket& socket, TlsSocket& tls) : socket_(socket), tls_(tls) {}
  executor_type get_executor() { return socket_.get_executor(); }

  template <class Handler>
  auto async_handshake(Handler&& handler) {
    return run<false>([](TlsSocket& tls) { return tls.attempt_handshake(); },
                      std::forward<Handler>(handler));
  }

  template <class Handler>
  auto async_shutdown(Handler&& handler) {
    return run<false>([](TlsSocket& tls) { return tls.attempt_shutdown(); },
                      std::forward<Handler>(handler));
  }

  template <class Buffers, class Handler>
  auto async_read_some(const Buffers& buffers, Handler&& handler) {
    boost::asio::mutable_buffer first;
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      first = *it;
      if (first.size() != 0) break;
    }
    return run<true>([first](TlsSocket& tls) { return tls.attempt_read(first); },
                     std::forward<Handler>(handler));
  }

  // Several buffers (a head and a body piece) are gathered into one record
  // while the first is small; a large first buffer goes out as it is.
  template <class Buffers, class Handler>
  auto async_write_some(const Buffers& buffers, Handler&& handler) {
    auto it = boost::asio::buffer_sequence_begin(buffers);
    const auto end = boost::asio::buffer_sequence_end(buffers);
    while (it != end && boost::asio::const_buffer(*it).size() == 0) ++it;
    boost::asio::const_buffer out;
    if (it != end) out = *it;
    if (it != end && std::next(it) != end && out.size() < TlsSocket::kGatherBytes) {
      auto& gathered = tls_.gathered();
      gathered.clear();
      for (; it != end && gathered.size() < TlsSocket::kGatherBytes; ++it) {
        const boost::asio::const_buffer piece = *it;
        const std::size_t take = std::min(piece.size(), TlsSocket::kGatherBytes - gathered.size());
        const char* data = static_cast<const char*>(piece.data());
        gathered.insert(gathered.end(), data, data + take);
      }
      out = boost::asio::buffer(gathered);
    }
    return run<true>([out](TlsSocket& tls) { return tls.attempt_write(out); },
                     std::forward<Handler>(handler));
  }

 private:
  template <class Step, bool kBytes>
  struct Op {
    Socket& socket;
    TlsSocket& tls;
    Step step;
    TlsSocket::Attempt result{};
    bool waited = false;
    bool posted = false;

    template <class Self>
    void operator()(Self& self, boost::system::error_code ec = {}) {
      if (!posted) {
        if (ec) {
          result = {TlsSocket::Want::kNothing, 0, ec};  // the wait failed: closed or cancelled
        } else if (!socket.is_open()) {
          result = {TlsSocket::Want::kNothing, 0, boost::asio::error::bad_descriptor};
        } else {
          result = step(tls);
          if (result.want != TlsSocket::Want::kNothing) {
            waited = true;
            return socket.async_wait(
                result.want == TlsSocket::Want::kRead ? Socket::wait_read : Socket::wait_write,
                std::move(self));
          }
        }
        if (!waited) {
          // Done at once, inside the initiating call: complete from the queue.
          posted = true;
          return boost::asio::post(socket.get_executor(), std::move(self));
        }
      }
      if constexpr (kBytes) {
        self.complete(result.ec, result.bytes);
      } else {
        self.complete(result.ec);
      }
    }
  };

  template <bool kBytes, class Step, class Handler>
  auto run(Step step, Handler&& handler) {
    using Signature = std::conditional_t<kBytes, void(boost::system::error_code, std::size_t),
                                         void(boost::system::error_code)>;
    return boost::asio::async_compose<Handler, Signature>(
        Op<Step, kBytes>{socket_, tls_, std::move(step)}, handler, socket_);
  }

  Socket& socket_;
  TlsSocket& tls_;
};

}  // namespace sluice
