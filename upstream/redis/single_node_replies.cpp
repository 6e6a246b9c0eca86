// SingleNodeClient's replies: reading the connection, matching each reply to
// its command in order, and a NOSCRIPT answered by sending the script itself.
#include <boost/asio/post.hpp>

#include "upstream/redis/single_node_impl.hpp"

namespace sluice::redis {

namespace asio = boost::asio;

void SingleNodeClient::Impl::do_read() {
  Connection& c = *conn_;
  c.stream.async_read_some(
      asio::buffer(c.read_buf),
      [self = shared_from_this(), conn = conn_](const boost::system::error_code& ec,
                                                std::size_t n) { self->on_read(conn, ec, n); });
}

void SingleNodeClient::Impl::on_read(const ConnPtr& conn, const boost::system::error_code& ec,
                                     std::size_t n) {
  if (conn != conn_) return;
  if (ec) {
    on_connection_error(state() == State::kReady ? Error::kConnectionLost
                        : is_tls_error(ec)       ? Error::kTls
                                                 : Error::kConnect,
                        "read: " + ec.message());
    return;
  }
  if (!conn->reader.feed(conn->read_buf.data(), n)) {
    bump(counters_.protocol_errors);
    on_connection_error(Error::kProtocol, "reply reader: out of memory");
    return;
  }
  for (;;) {
    Reply reply;
    const auto result = conn->reader.next(reply);
    if (result == ReplyReader::Result::kError) {
      bump(counters_.protocol_errors);
      on_connection_error(Error::kProtocol, "malformed reply: " + conn->reader.error());
      return;
    }
    if (result == ReplyReader::Result::kNeedMore) break;
    bump(counters_.replies);
    on_reply(std::move(reply));
    if (conn != conn_) return;  // the reply ended this connection
  }
  do_read();
}

void SingleNodeClient::Impl::on_reply(Reply reply) {
  if (awaiting_.empty()) {
    bump(counters_.protocol_errors);
    on_connection_error(Error::kProtocol, "reply without a pending command");
    return;
  }
  CommandQueue::Entry entry = awaiting_.pop_front();
  switch (CommandQueue::classify(entry, reply)) {
    case CommandQueue::Action::kInternal:
      return on_internal_reply(entry.kind, reply);
    case CommandQueue::Action::kDropLate:
      bump(counters_.late_replies);
      if (entry.script && entry.script->late && !reply.is_error()) {
        asio::post(ex_, [call = std::move(entry.script), r = std::move(reply)]() mutable {
          (*call->late)(call->keys, call->args, std::move(r));
        });
      }
      return;
    case CommandQueue::Action::kDeliver:
      return post_result(std::move(entry.handler), {}, std::move(reply));
    case CommandQueue::Action::kRetryWithEval:
      return retry_with_eval(std::move(entry));
    case CommandQueue::Action::kNoScript:
      bump(counters_.server_errors);
      return post_result(std::move(entry.handler), Error::kNoScript, std::move(reply));
    case CommandQueue::Action::kServerError:
      bump(counters_.server_errors);
      emit(Event::kErrorReply, reply.str);
      return post_result(std::move(entry.handler), Error::kServer, std::move(reply));
  }
}

void SingleNodeClient::Impl::retry_with_eval(CommandQueue::Entry entry) {
  bump(counters_.noscript_retries);
  const CommandQueue::ScriptCall& call = *entry.script;
  encoder_.add("EVAL");
  encoder_.add(*call.body);
  encoder_.add(call.numkeys);
  for (const std::string& k : call.keys) encoder_.add(k);
  for (const std::string& a : call.args) encoder_.add(a);
  encoder_.append_to(conn_->out_pending);
  entry.retried = true;
  send_user(std::move(entry));
}

// --- deadlines --------------------------------------------------------------

}  // namespace sluice::redis
