// UpstreamExchange: a route's retry policy applied (routes[].retry). A
// failed attempt, or an answer whose status the policy names, goes again to
// a server not tried yet if one is up, after a jittered backoff, within the
// policy's attempts, the request's deadline and the upstream's retry budget,
// and only while nothing of the response went to the client and the body
// sent so far was kept (replay_leg.hpp).
#include <algorithm>
#include <charconv>

#include <boost/beast/http/field.hpp>

#include "upstream/balance/stable_hash.hpp"
#include "upstream/exchange/upstream_exchange.hpp"

namespace sluice {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;

// A gRPC response's status in its head (a Trailers-Only answer); -1: none.
int grpc_status_in(const HttpFields& head) {
  const auto type = head.find(http::field::content_type);
  if (type == head.end() || !type->value().starts_with("application/grpc")) return -1;
  const auto status = head.find("grpc-status");
  if (status == head.end()) return -1;
  int value = -1;
  const auto text = status->value();
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc{} && end == text.data() + text.size() ? value : -1;
}

}  // namespace

bool UpstreamExchange::retry_by_policy(RetryCause cause) {
  const RetryPolicy* policy = request_.retry;
  if (!policy || !policy->retries(cause) || policy_retries_ + 1 >= policy->attempts) return false;
  // Not idempotent (without the opt-in), or a body sent that was not kept.
  if (!retry_keeps_body_ || !replay_.replayable() ||
      replay_.kept().size() > policy->max_replay_bytes) {
    return false;
  }
  if (progress_ == Progress::kResponseStarted || request_.websocket) return false;
  if (host_.client_closed()) return false;
  const Clock::time_point now = Clock::now();
  if (now >= deadline_at_) return false;
  if (retry_held_) {
    budget_->retry_ended();  // the last retry is over
    retry_held_ = false;
  }
  if (!budget_->try_start_retry(upstream_cfg_->retry_budget)) {
    ++facts_.retries_refused;
    return false;
  }
  // Never the same server twice while another is up.
  std::optional<std::size_t> next = pools_.pick(*upstream_cfg_, tried_, request_.hash_key);
  if (!next) next = pools_.pick(*upstream_cfg_, {}, request_.hash_key);
  if (!next) {
    budget_->retry_ended();
    return false;
  }
  retry_held_ = true;
  ++policy_retries_;
  ++facts_.retries;
  next_server_ = *next;
  in_flight_.release();
  replay_.rewind();
  upstream_status_ = 0;
  upstream_server_.clear();
  const auto draw = mix64(static_cast<std::uint64_t>(now.time_since_epoch().count()) ^
                          reinterpret_cast<std::uintptr_t>(this));
  Clock::duration wait = retry_backoff(*policy, policy_retries_, draw);
  if (deadline_at_ != Clock::time_point::max()) wait = std::min(wait, deadline_at_ - now);
  if (!backoff_timer_) backoff_timer_ = std::make_unique<ExchangeTimer>(executor_);
  backing_off_ = true;
  // A client that leaves meanwhile ends the wait, where the host can tell
  // (its watch is only for a request that went whole).
  if (real_client_.body_done()) host_.awaiting_response(true);
  backoff_timer_->expires_after(wait);
  backoff_timer_->async_wait(
      handler([generation = ++backoff_generation_](UpstreamExchange& self,
                                                   beast::error_code ec) {
        if (generation != self.backoff_generation_ || !self.backing_off_) return;
        self.backing_off_ = false;
        if (ec || self.host_.client_closed()) return self.abort();
        self.on_backoff(generation);
      }));
  return true;
}

void UpstreamExchange::on_backoff(std::uint64_t) {
  host_.awaiting_response(false);  // the legs watch again once the request went
  upstream_timed_out_ = false;
  slot_.deadline = {};  // a wait for a connection slot at the next server has its own
  start_attempt(next_server_);
}

bool UpstreamExchange::retry_answer(const HttpFields& head) {
  if (!request_.retry) return false;
  RetryCause cause{};
  if (!status_cause(upstream_status_, grpc_status_in(head), cause)) return false;
  const unsigned status = upstream_status_;
  if (!retry_by_policy(cause)) return false;
  // The answer counts among the attempts, and for its server (outlier detection).
  upstream_status_ = status;
  note_attempt(UpstreamOutcome::kOk);
  upstream_status_ = 0;
  drop_upstream();  // the answer is dropped unread
  return true;
}

void UpstreamExchange::leave_retry_budget() {
  if (!budget_) return;
  if (retry_held_) budget_->retry_ended();
  retry_held_ = false;
  budget_->request_ended();
  budget_ = nullptr;
}

std::string UpstreamExchange::servers_tried() const {
  std::string out;
  for (const AttemptRecord& attempt : attempts_) {
    if (!out.empty()) out += ',';
    out += upstream_cfg_->servers[attempt.server].to_string();
  }
  return out;
}

}  // namespace sluice
