// The upstream answered 101 Switching Protocols: to a WebSocket handshake
// that it accepts, the exchange becomes a tunnel; to anything else it is a
// protocol error (the client gets a 502, the connection is dropped).
#include <spdlog/spdlog.h>

#include "upstream/exchange/upstream_exchange.hpp"

namespace sluice {

namespace beast = boost::beast;

void UpstreamExchange::start_tunnel() {
  // Either connection closed while the 101 was on its way in: by the drain
  // timeout (the client), or by the upstream deadline.
  if (host_.client_closed()) return abort();
  if (upstream_timed_out_) return io_failed(beast::error::timeout);
  if (!upstream_->stream.socket().is_open()) return abort();
  const auto& res = res_parser_->get();
  const UpgradeStreams client = client_.upgrade_streams();
  if (!request_.websocket || !client.stream || !grants_websocket_upgrade(res.base())) {
    spdlog::warn("upstream {} server {}: 101 Switching Protocols to a request that did not ask "
                 "for a WebSocket upgrade",
                 upstream_cfg_->name, upstream_->server);
    host_.count_upstream(*upstream_cfg_, UpstreamOutcome::kProtocolError);
    drop_upstream();
    return fail(UpstreamError::kUnexpectedUpgrade);
  }
  upstream_status_ = 101;
  upstream_server_ = upstream_->server;
  host_.count_upstream(*upstream_cfg_, UpstreamOutcome::kOk);
  ResponseStart start;
  start.status = upstream_status_;
  start.reason = res.reason();
  start.fields = &res.base();
  client_.start_response(start);
  std::string head = client_.upgrade_head();
  res_parser_.reset();
  host_.tunnel_opened();
  req_head_ = {};
  tunnel_ = std::make_unique<Tunnel>(host_, *client.stream, *client.buffered, std::move(upstream_),
                                     request_.tunnel_idle_timeout, request_.send_timeout);
  tunnel_->start(std::move(head), std::shared_ptr<Tunnel>(self_.lock(), tunnel_.get()));
}

}  // namespace sluice
