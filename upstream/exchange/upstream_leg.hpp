// One upstream protocol's half of an exchange: it speaks HTTP/1.1 on a
// connection the exchange connected (http1_leg.hpp), or opens a stream on a
// shared HTTP/2 connection (h2_leg.hpp), relays the request from the client
// leg and the response back to it. The exchange (upstream_exchange.hpp)
// keeps what does not depend on the protocol: which server, the connect, the
// retry rule, the request's deadline, and the one end told to its host.
//
// Both legs live inside their exchange (no allocation per request); it picks
// one for each attempt and hands it the client leg's completions until the
// exchange ends. Everything runs on the worker's executor.
#pragma once

#include <chrono>
#include <cstddef>

#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/beast/core/error.hpp>

#include "upstream/stream_types.hpp"
#include "upstream/upstream_error.hpp"

namespace sluice {

class UpstreamExchange;

// A timer of the exchange's, on the worker's executor.
using ExchangeTimer = boost::asio::basic_waitable_timer<
    std::chrono::steady_clock, boost::asio::wait_traits<std::chrono::steady_clock>, WorkerExecutor>;

// How an exchange ends: ExchangeResult::End's values, named here for the
// legs, whose headers come before ExchangeResult's (upstream_exchange.cpp
// checks that the two agree).
enum class LegEnd {
  kRelayed,            // the response reached the client whole
  kUpstreamFailed,     // no response byte sent yet: the client gets a local reply
  kRequestBodyFailed,  // reading the request body failed (the upstream connection is dropped)
  kAborted,            // nothing can be sent any more: cut the client connection
};

class UpstreamLeg {
 public:
  // An attempt at the server the exchange picked: the request goes, on a
  // pooled connection or a new one (the exchange connects it), or on a stream.
  virtual void start() = 0;

  // The client leg's operations completed (client_leg.hpp).
  virtual void on_body_read(boost::beast::error_code ec, std::size_t n) = 0;
  virtual void on_continue_sent(boost::beast::error_code ec) = 0;
  virtual void on_response_sent(boost::beast::error_code ec) = 0;

  // The host's deadline passed on the upstream's side.
  virtual void on_deadline() = 0;
  // Nothing more goes to or comes from the server; what is in flight fails
  // and ends the exchange (as aborted).
  virtual void close() = 0;
  // Lets go of the upstream's connection or stream at once.
  virtual void release() = 0;
  // Ends the exchange as `how` once nothing of the leg's is in flight on the
  // client leg (a body read is cancelled first).
  virtual void end(LegEnd how, UpstreamError error) = 0;
  // The exchange is over: what one request used is let go.
  virtual void reset() = 0;

 protected:
  ~UpstreamLeg() = default;
};

}  // namespace sluice
