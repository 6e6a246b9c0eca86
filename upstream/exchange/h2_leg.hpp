// The HTTP/2 leg of an exchange (protocol h2c or h2): the request goes as a
// stream on a connection the worker shares among its exchanges
// (h2_connection.hpp), taken from the pool or opened here (it connects
// itself). Its body is relayed from the client leg once the connection is
// ready, a piece at a time; the response head, its DATA (given back to the
// flow-control window as the client takes it) and its trailers are relayed
// to the client leg, overlapping with the request body when the client leg
// is full duplex (a bidirectional gRPC call over an HTTP/2 stream).
//
// The connection wakes the leg when the stream changes; the leg posts itself
// a look at it (progress) on the worker's executor. Its wait for the upstream
// is a deadline of its own (SweptDeadline, on its connection's timer), so that
// the host's one deadline stays the client's.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common/deadline_sweep.hpp"
#include "upstream/exchange/upstream_leg.hpp"
#include "upstream/h2/h2_head.hpp"

namespace sluice {

class H2Connection;
struct H2Stream;

class H2Leg final : public UpstreamLeg, public SweptDeadline {
 public:
  explicit H2Leg(UpstreamExchange& exchange) : x_(exchange) {}

  // A stream at the server the exchange picked: on a pooled connection, a
  // new one, or (at max_connections) once one frees up.
  void start() override;
  void on_body_read(boost::beast::error_code ec, std::size_t n) override;
  void on_continue_sent(boost::beast::error_code ec) override;
  void on_response_sent(boost::beast::error_code ec) override;
  void on_deadline() override;
  void close() override;
  // Lets go of the stream (reset if still open) and of the connection.
  void release() override;
  void end(LegEnd how, UpstreamError error) override;
  void reset() override;

 private:
  using Clock = std::chrono::steady_clock;
  // The request body's relay. kContinuing: the client is being told 100
  // Continue (a write on its leg, no read), then the body is read.
  enum class BodyRelay {
    kWaitingForConnection,
    kContinuing,
    kReading,
    kSending,
    kCancelling,
    kDone
  };
  enum class ResponseRelay { kAwaitingHead, kRelaying, kSending, kDone };

  template <class Fn>
  auto handler(Fn fn);  // defined in upstream_exchange.hpp
  void open_stream();
  void post_progress();
  // Looks at the stream and moves each relay on as far as it can.
  void progress();
  void start_body();
  void relay_head();
  void relay();
  void stream_failed();
  // No operation of the leg's is in flight on the client leg (a retry may start).
  bool client_idle() const {
    return body_ != BodyRelay::kReading && body_ != BodyRelay::kContinuing &&
           body_ != BodyRelay::kCancelling;
  }
  void connect_failed();
  // The upstream has response_timeout (to the request's deadline) from now
  // for its next event.
  void touch();
  // The wait for the upstream ended: it timed out, unless the client is
  // the one slow (taking the response), which waits again.
  void deadline_passed() noexcept override;
  void on_timer();
  // Drops keep_, once the handler running now is done (every exchange's
  // release comes here: the test is inline).
  void let_go_of_exchange() {
    if (keep_) let_go_later();
  }
  void let_go_later();

  UpstreamExchange& x_;
  std::shared_ptr<H2Connection> conn_;  // shared with other exchanges
  std::shared_ptr<H2Stream> stream_;
  // The exchange (and its host) while the leg waits on its stream: nothing
  // else may hold it (a mirror, a request whose client left), the stream's
  // wake being weak. Taken with the leg's deadline, dropped by release().
  std::shared_ptr<UpstreamExchange> keep_;
  H2HeaderBlock head_;        // the request head in HTTP/2 terms
  std::string out_;           // response DATA lent to the client leg
  std::size_t out_owed_ = 0;  // of it, not yet given back to the flow-control window
  BodyRelay body_ = BodyRelay::kDone;
  ResponseRelay response_ = ResponseRelay::kDone;
  // An end that waits for the client leg's operation in flight.
  std::optional<std::pair<LegEnd, UpstreamError>> pending_end_;
  std::uint64_t generation_ = 0;  // of stream_: handlers of an earlier stream do nothing
  bool progress_posted_ = false;
  bool opened_ = false;     // this leg opened conn_ (and counts it once ready)
  bool last_sent_ = false;  // the piece being sent ends the response
};

}  // namespace sluice
