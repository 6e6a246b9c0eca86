#include "upstream/exchange/retry_rule.hpp"

namespace sluice {

bool is_idempotent(boost::beast::http::verb v) {
  using boost::beast::http::verb;
  return v == verb::get || v == verb::head || v == verb::options || v == verb::put ||
         v == verb::delete_;
}

Retry retry_rule(const FailedAttempt& a) {
  if (a.refused) return a.refused_before < kMaxRefusedRetries ? Retry::kAnotherStream : Retry::kNo;
  if (!a.idempotent) return Retry::kNo;
  if (a.stage == FailedAttempt::Stage::kConnect) {
    return a.servers_tried < 2 ? Retry::kNextServer : Retry::kNo;
  }
  const bool fresh = !a.timed_out && a.closed_by_server && a.pooled_connection &&
                     !a.retried_on_fresh && a.body_empty && !a.response_started;
  return fresh ? Retry::kFreshConnection : Retry::kNo;
}

}  // namespace sluice
