// A read of a plain TCP socket that, once the kernel said nothing is left
// to read, waits for the event loop's word before it asks again.
//
// Asio's own read tries the socket first (a speculative read) whenever no
// read is queued, so a connection that answered one message and has no
// next one yet costs a read that fails with EAGAIN before the wait: one
// system call per message, two per proxied gRPC call. Here each read asks
// the kernel, with the data, how many bytes are left (TCP_INQ, set on the
// socket at its first read): when none are, this read tells Asio's reactor
// so (the outcome its own reads give only at the end of the stream), and
// the next read waits for epoll, as nginx waits after a short read. Epoll
// is edge-triggered, so bytes that arrive after that read are reported and
// read then. A peer's FIN counts as something left (the kernel says so), so
// the end of the stream is read at once.
//
// What the kernel does not count is a reset that came in the same instant
// as the last bytes (nginx learns of it from EPOLLRDHUP, which Asio never
// shows its operations): the next read then waits, and the reset is noticed
// at the connection's next write or by its timeout. So only streams whose
// every wait has a timeout read this way (a client's or an upstream's
// ByteStream); Redis connections, whose subscription only reads, do not.
//
// It is Asio's receive operation with that one difference, built on Asio's
// detail layer (epoll only: a static_assert checks) because the public
// interface has no way to say it. Where TCP_INQ is refused (an older
// kernel) every read is tried at once, as Asio's. It bypasses
// beast::basic_stream's read, whose timeout Sluice never sets on these
// streams (their deadlines close or cancel the socket, which ends this read
// with operation_aborted as usual). Per-operation cancellation slots are not
// supported.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

#include <boost/asio/buffer.hpp>
#include <boost/asio/detail/bind_handler.hpp>
#include <boost/asio/detail/fenced_block.hpp>
#include <boost/asio/detail/handler_alloc_helpers.hpp>
#include <boost/asio/detail/handler_cont_helpers.hpp>
#include <boost/asio/detail/handler_work.hpp>
#include <boost/asio/detail/memory.hpp>
#include <boost/asio/detail/reactor.hpp>
#include <boost/asio/detail/reactor_op.hpp>
#include <boost/asio/detail/socket_ops.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/query.hpp>

namespace sluice {

namespace drained_read_detail {

namespace ad = boost::asio::detail;
static_assert(std::is_same_v<ad::reactor, ad::epoll_reactor>,
              "drained reads are written for Asio's epoll reactor");

template <class Handler, class IoExecutor>
class RecvOp : public ad::reactor_op {
 public:
  BOOST_ASIO_DEFINE_HANDLER_PTR(RecvOp);

  RecvOp(ad::socket_type socket, boost::asio::mutable_buffer buffer, Handler& handler,
         const IoExecutor& io_ex)
      : reactor_op(boost::system::error_code(), &RecvOp::do_perform, &RecvOp::do_complete),
        socket_(socket),
        buffer_(buffer),
        handler_(std::move(handler)),
        work_(handler_, io_ex) {}

  // One recvmsg(). Done and exhausted (Asio asks epoll before it tries the
  // socket again) when the kernel said nothing is left; also at the end of
  // the stream and on an error, as Asio's own read.
  static status do_perform(reactor_op* base) {
    auto* o = static_cast<RecvOp*>(base);
    iovec iov{o->buffer_.data(), o->buffer_.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = 0;
    do {
      n = ::recvmsg(o->socket_, &msg, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return not_done;  // wait for epoll
    if (n <= 0) {
      o->ec_ = n == 0 ? boost::asio::error::eof
                      : boost::system::error_code(errno, boost::asio::error::get_system_category());
      o->bytes_transferred_ = 0;
      return done_and_exhausted;
    }
    o->bytes_transferred_ = static_cast<std::size_t>(n);
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_TCP || c->cmsg_type != TCP_CM_INQ) continue;
      int left = 0;
      std::memcpy(&left, CMSG_DATA(c), sizeof left);
      return left == 0 ? done_and_exhausted : done;
    }
    return done;  // no word from the kernel: try again at once
  }

  // As Asio's receive operation completes: the memory goes back before the
  // handler runs (a copy of it, which may own that memory); no call when the
  // io_context is shut down (`owner` null).
  static void do_complete(void* owner, ad::operation* base, const boost::system::error_code&,
                          std::size_t) {
    auto* o = static_cast<RecvOp*>(base);
    ptr p = {ad::addressof(o->handler_), o, o};
    ad::handler_work<Handler, IoExecutor> w(std::move(o->work_));
    ad::binder2<Handler, boost::system::error_code, std::size_t> handler(o->handler_, o->ec_,
                                                                         o->bytes_transferred_);
    p.h = ad::addressof(handler.handler_);
    p.reset();
    if (owner != nullptr) {
      ad::fenced_block b(ad::fenced_block::half);
      w.complete(handler, handler.handler_);
    }
  }

 private:
  ad::socket_type socket_;
  boost::asio::mutable_buffer buffer_;
  Handler handler_;
  ad::handler_work<Handler, IoExecutor> work_;
};

// The socket's implementation (descriptor, state, reactor data), which
// basic_socket keeps protected.
template <class Socket>
struct SocketAccess : Socket {
  static auto& implementation(Socket& socket) {
    return (socket.*(&SocketAccess::impl_)).get_implementation();
  }
};

}  // namespace drained_read_detail

// Drained reads of one socket for its whole life (a stream's): it keeps the
// reactor of the socket's io_context, looked up at the first read, when it
// also sets TCP_INQ on the socket.
class DrainedReader {
 public:
  // Reads into `buffer` from `socket` (an Asio TCP socket, open and
  // connected, always the same one): `handler(error_code, bytes)`, as
  // socket.async_read_some.
  template <class Socket, class Handler>
  void async_read(Socket& socket, boost::asio::mutable_buffer buffer, Handler&& handler_in) {
    namespace ad = drained_read_detail::ad;
    using Op = drained_read_detail::RecvOp<std::decay_t<Handler>, typename Socket::executor_type>;
    std::decay_t<Handler> handler(std::forward<Handler>(handler_in));  // moved into the op
    auto& impl = drained_read_detail::SocketAccess<Socket>::implementation(socket);
    if (reactor_ == nullptr) {  // the first read: the kernel is to say what is left
      reactor_ = &boost::asio::use_service<ad::reactor>(
          boost::asio::query(socket.get_executor(), boost::asio::execution::context));
      const int on = 1;
      ::setsockopt(impl.socket_, SOL_TCP, TCP_INQ, &on, sizeof on);  // refused: no word
    }
    const bool is_continuation = boost_asio_handler_cont_helpers::is_continuation(handler);
    typename Op::ptr p = {ad::addressof(handler), Op::ptr::allocate(handler), nullptr};
    p.p = new (p.v) Op(impl.socket_, buffer, handler, socket.get_executor());
    if (buffer.size() == 0) {
      reactor_->post_immediate_completion(p.p, is_continuation);  // nothing to read: done
    } else if ((impl.state_ & ad::socket_ops::non_blocking) != 0 ||
               ad::socket_ops::set_internal_non_blocking(impl.socket_, impl.state_, true,
                                                         p.p->ec_)) {
      reactor_->start_op(ad::reactor::read_op, impl.socket_, impl.reactor_data_, p.p,
                         is_continuation, true);
    } else {
      reactor_->post_immediate_completion(p.p, is_continuation);  // with the error
    }
    p.v = p.p = nullptr;
  }

 private:
  drained_read_detail::ad::reactor* reactor_ = nullptr;
};

}  // namespace sluice
