// The HTTP/1.1 leg of an exchange, on a connection its exchange took from the
// pool or connected: the request head (with the body bytes at hand in the
// same write), the 100 Continue Sluice owes a client that waits for it, the
// body a piece at a time (chunked when the request is), then the response
// head (interim 1xx heads dropped), its body through the relay buffer and its
// trailers; a complete keep-alive exchange gives the connection back to the
// pool. A 101 to a WebSocket handshake turns the connections into a tunnel.
//
// It lives inside its exchange; every handler runs on the worker's executor
// through the exchange's upstream_handler.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>

#include "upstream/exchange/framing.hpp"
#include "upstream/exchange/tunnel.hpp"
#include "upstream/exchange/upstream_leg.hpp"
#include "upstream/http_fields.hpp"

namespace sluice {

class Http1Leg final : public UpstreamLeg {
 public:
  using ResponseParser = boost::beast::http::response_parser<boost::beast::http::buffer_body, FieldAllocator<char>>;
  using ParserStorage = std::unique_ptr<std::optional<ResponseParser>>;

  explicit Http1Leg(UpstreamExchange& exchange) : x_(exchange) {}

  void start() override;
  void on_body_read(boost::beast::error_code ec, std::size_t n) override;
  void on_continue_sent(boost::beast::error_code ec) override;
  void on_response_sent(boost::beast::error_code ec) override;
  void on_deadline() override;
  void close() override;
  void release() override;
  void end(LegEnd how, UpstreamError error) override;
  void reset() override;

  // The connection is ready (pooled, or connected and shaken hands): the request goes.
  void send_request_head();
  // Whether a byte of the response came (parsed, or buffered unparsed).
  bool response_started() const;
  // The connection is dropped with a read in flight: the parser goes with it
  // (it gets no relay buffer to write a body to any more).
  ParserStorage take_parser();

 private:
  // The response parser, in storage of its own that is made once: a read in
  // flight on a dropped connection still holds the parser, which then goes
  // with the connection (see take_parser).
  class ParserSlot {
   public:
    ResponseParser* operator->() { return &**storage_; }
    const ResponseParser* operator->() const { return &**storage_; }
    ResponseParser& operator*() { return **storage_; }
    explicit operator bool() const { return storage_ && storage_->has_value(); }
    void emplace() {
      if (!storage_) storage_ = std::make_unique<std::optional<ResponseParser>>();
      storage_->emplace();
    }
    void reset() {
      if (storage_) storage_->reset();
    }
    ParserStorage release() { return std::move(storage_); }

   private:
    ParserStorage storage_;
  };

  template <class Fn>
  auto handler(Fn fn);  // defined in upstream_exchange.hpp
  // Writes the request head if still pending, then `n` body bytes (and the
  // last chunk when `last` and chunked) upstream, in one write.
  template <class Handler>
  void write_upstream(const char* data, std::size_t n, bool last, Handler&& handler);
  void on_request_head_sent(boost::beast::error_code ec);
  void on_upstream_body_written(boost::beast::error_code ec);
  void read_response_head();
  void on_response_head(boost::beast::error_code ec);
  void read_upstream_body();
  void on_upstream_body(boost::beast::error_code ec);
  void relay_trailers();
  void finish();
  void start_tunnel();

  UpstreamExchange& x_;
  ParserSlot res_parser_;
  ChunkPrefix chunk_prefix_;
  PieceBuffers out_buffers_;       // one write in flight at a time
  bool req_head_pending_ = false;  // the next write upstream starts with the head
  bool upstream_reusable_ = false;
  std::size_t head_fields_ = 0;  // the response head's fields (trailers come after)
  // A chunked response's head fields, in the order of the fields' list: the
  // parser adds a trailer after them, or beside a head field of the same
  // name, so a trailer is a field that is not one of these.
  std::vector<const void*> head_elements_;
  // The response ended and its chunked body brought trailer fields.
  bool trailers_came() const;
  HttpFields trailers_;
  ChunkExtensionLimit chunk_extension_limit_;
  // After a 101: the client and upstream connections relayed both ways. Kept
  // until the host goes (its handlers may still be queued when it ends).
  std::unique_ptr<Tunnel> tunnel_;
};

}  // namespace sluice
