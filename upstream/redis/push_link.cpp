#include "upstream/redis/push_link.hpp"

#include <boost/asio/connect.hpp>

#include "upstream/redis/client.hpp"

namespace sluice::redis {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

std::optional<std::string_view> pubsub_payload(const Reply& reply, std::string_view channel) {
  const auto text = [](const Reply& r) {
    return r.type == Reply::Type::kString || r.type == Reply::Type::kStatus;
  };
  if (reply.type != Reply::Type::kArray || reply.elements.size() != 3) return std::nullopt;
  const Reply& kind = reply.elements[0];
  const Reply& name = reply.elements[1];
  const Reply& payload = reply.elements[2];
  if (!text(kind) || kind.str != "message" || !text(name) || name.str != channel ||
      !text(payload)) {
    return std::nullopt;
  }
  return std::string_view(payload.str);
}

PushLink::PushLink(const asio::any_io_executor& executor, const Options& options,
                   Credentials credentials, std::shared_ptr<asio::ssl::context> tls_context,
                   Endpoint server)
    : user_(std::move(credentials.user)),
      password_(std::move(credentials.password)),
      timeout_(options.connect_timeout),
      server_(std::move(server)),
      verify_name_(options.server_name.empty() ? server_.host : options.server_name),
      conn_(executor, std::move(tls_context)),
      deadline_(executor) {}

void PushLink::start(std::vector<std::vector<std::string>> commands, ReplyHandler on_reply,
                         DownHandler on_down) {
  commands_ = std::move(commands);
  on_reply_ = std::move(on_reply);
  on_down_ = std::move(on_down);
  if (!conn_.reader.valid()) return fail("cannot create reply reader");
  deadline_.expires_after(timeout_);
  deadline_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec && !self->settled_)
      self->fail("no answer within " + std::to_string(self->timeout_.count()) + " ms");
  });
  // Names and IP literals alike go through the resolver (a literal resolves at once).
  conn_.resolver.async_resolve(
      server_.host, std::to_string(server_.port),
      [self = shared_from_this()](const boost::system::error_code& ec,
                                  const tcp::resolver::results_type& results) {
        if (self->closed_) return;
        if (ec) return self->fail("resolve: " + ec.message());
        asio::async_connect(self->conn_.stream.socket(), results,
                            [self](const boost::system::error_code& e, const tcp::endpoint&) {
                              self->on_connect(e);
                            });
      });
}

void PushLink::on_connect(const boost::system::error_code& ec) {
  if (closed_) return;
  if (ec) return fail("connect: " + ec.message());
  if (!conn_.stream.is_tls()) return send_commands();
  if (const auto vec = conn_.stream.prepare_tls(verify_name_)) {
    return fail("TLS setup: " + vec.message());
  }
  conn_.stream.async_handshake([self = shared_from_this()](const boost::system::error_code& e) {
    if (self->closed_) return;
    if (e) return self->fail("TLS handshake: " + e.message());
    self->send_commands();
  });
}

void PushLink::send_commands() {
  // AUTH (when set) and the commands go out in one write.
  if (!password_.empty()) {
    encoder_.add("AUTH");
    if (!user_.empty()) encoder_.add(user_);
    encoder_.add(password_);
    encoder_.append_to(conn_.out_writing);
    auth_pending_ = true;
  }
  for (const auto& command : commands_) {
    for (const std::string& arg : command) encoder_.add(arg);
    encoder_.append_to(conn_.out_writing);
  }
  conn_.stream.async_write(
      asio::buffer(conn_.out_writing),
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
        if (self->closed_) return;
        if (ec) return self->fail("write: " + ec.message());
        self->conn_.out_writing.clear();
      });
  do_read();
}

void PushLink::do_read() {
  conn_.stream.async_read_some(
      asio::buffer(conn_.read_buf),
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
        self->on_read(ec, n);
      });
}

void PushLink::on_read(const boost::system::error_code& ec, std::size_t n) {
  if (closed_) return;
  if (ec) return fail(ec == asio::error::eof ? "closed by the server" : "read: " + ec.message());
  if (!conn_.reader.feed(conn_.read_buf.data(), n)) return fail("reply reader: out of memory");
  for (;;) {
    Reply reply;
    const auto result = conn_.reader.next(reply);
    if (result == ReplyReader::Result::kError)
      return fail("malformed reply: " + conn_.reader.error());
    if (result == ReplyReader::Result::kNeedMore) break;
    on_reply(reply);
    if (closed_) return;  // the handler closed the link, or it failed
  }
  do_read();
}

void PushLink::on_reply(const Reply& reply) {
  if (auth_pending_) {
    auth_pending_ = false;
    if (reply.is_error()) fail("AUTH rejected: " + reply.str);
    return;
  }
  on_reply_(reply);
}

void PushLink::settle() {
  settled_ = true;
  deadline_.cancel();
}

void PushLink::fail(std::string reason) {
  if (closed_) return;
  DownHandler handler = std::move(on_down_);
  close();
  if (handler) handler(format_address(server_.host, server_.port) + ": " + reason);
}

void PushLink::close() {
  if (closed_) return;
  closed_ = true;
  deadline_.cancel();
  conn_.close();
}

}  // namespace sluice::redis
