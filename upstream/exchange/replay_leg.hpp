// The client leg as an exchange under a retry policy sees it: the request
// body read from the client is kept as it goes upstream (up to the policy's
// max_replay_bytes), so that a retry sends it again from its start; once the
// kept bytes are replayed, the rest is read from the client as before. A
// body longer than the bound is not kept, and its request cannot go again
// once a byte of it went. Everything else passes through to the client leg.
//
// A replayed read completes as the client leg's do: posted to the worker's
// executor, never from inside read_body (see client_leg.hpp).
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "upstream/exchange/client_leg.hpp"

namespace sluice {

class UpstreamExchange;

class ReplayLeg final : public ClientLeg {
 public:
  explicit ReplayLeg(UpstreamExchange& exchange) : x_(exchange) {}

  // A request whose body is kept up to `max_bytes`, read from `client`.
  void arm(ClientLeg& client, std::size_t max_bytes);
  // The request is over: what was kept goes (a large buffer is freed).
  void disarm();
  // Keeps up to `max_bytes` from now on (what is kept already stays).
  void extend(std::size_t max_bytes) { max_bytes_ = max_bytes; }
  // The client was told to go on sending its body (a read ahead did): the
  // exchange does not tell it again.
  void continue_sent() { continued_ = true; }
  // What was kept is a body read ahead: the exchange hears when its replay
  // is done (read_ahead_replayed), and with `free_after` (kept for nothing
  // else) it is freed then, and no more is kept.
  void replaying_read_ahead(bool free_after) {
    read_ahead_held_ = true;
    once_ = free_after;
  }
  // A read from the client completed with `n` bytes at `data`: kept, while
  // within the bound.
  void keep(const char* data, std::size_t n);
  // Everything read from the client so far is kept: a retry can send it again.
  bool replayable() const { return !overflowed_; }
  // What was kept: the body read so far.
  std::string_view kept() const { return kept_; }
  // The next attempt sends the body from its start (a body read to its end
  // with no byte in it still ends with a read: a chunked body's last chunk).
  void rewind() {
    replay_at_ = 0;
    end_owed_ = reads_ > 0;
  }

  bool body_done() const override {
    return !replaying() && !end_owed_ && client_->body_done();
  }
  bool body_at_hand() const override {
    return replaying() || end_owed_ || client_->body_at_hand();
  }
  bool expects_continue() const override { return !continued_ && client_->expects_continue(); }
  void send_continue() override { client_->send_continue(); }
  void read_body(std::span<char> into) override;
  void cancel_read() override {
    if (!replay_posted_) client_->cancel_read();
  }
  const HttpFields* request_trailers() const override { return client_->request_trailers(); }
  bool full_duplex() const override { return client_->full_duplex(); }
  void start_response(const ResponseStart& start) override { client_->start_response(start); }
  void send_response(const char* data, std::size_t n, bool last) override {
    client_->send_response(data, n, last);
  }
  void set_response_trailers(const HttpFields& trailers) override {
    client_->set_response_trailers(trailers);
  }
  bool keeps_client() const override { return client_->keeps_client(); }
  UpgradeStreams upgrade_streams() override { return client_->upgrade_streams(); }
  std::string upgrade_head() override { return client_->upgrade_head(); }

 private:
  // The kept bytes still to go; once they went, a body the client ended is
  // ended by the last replayed read (end_owed_ until then).
  bool replaying() const { return replay_at_ < kept_.size(); }

  UpstreamExchange& x_;
  ClientLeg* client_ = nullptr;
  std::string kept_;
  std::size_t max_bytes_ = 0;
  std::size_t replay_at_ = 0;  // kept_ is replayed while below its size
  bool overflowed_ = false;
  std::size_t reads_ = 0;  // reads from the client, kept ones (empty ones too)
  bool end_owed_ = false;
  bool replay_posted_ = false;  // a replayed read's completion is on its way
  bool continued_ = false;
  bool once_ = false;
  bool read_ahead_held_ = false;
};

}  // namespace sluice
