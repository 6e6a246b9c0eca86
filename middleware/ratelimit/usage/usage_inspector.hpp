// The usage a response body carries (cost_from_response.body), read as the
// body is relayed: a JSON body (application/json, or any +json type) by
// JsonUsageScanner, a text/event-stream body by SseUsageScanner, each
// decoded first when its Content-Encoding is gzip or deflate. Nothing is held
// back from the client and nothing is kept beyond the scanners' bounded
// state. Used on the worker's executor, one per request of a route that
// reads it.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string_view>

#include "common/body_observer.hpp"
#include "gateway/config/usage_expression.hpp"
#include "middleware/ratelimit/usage/inflater.hpp"
#include "middleware/ratelimit/usage/json_usage_scanner.hpp"
#include "middleware/ratelimit/usage/sse_usage_scanner.hpp"

namespace sluice::usage {

// What reading a body came to (the label of sluice_ratelimit_body_usage_total).
enum class BodyUsage : std::uint8_t {
  kFound,       // every path held a valid number
  kMissing,     // the body ended (or was cut) without them, or none came
  kInvalid,     // a path held something else: a string, null, a negative number...
  kTruncated,   // not found within max_inspect_bytes (of the body, or of an event)
  kUnreadable,  // neither JSON nor an event stream, an encoding with no decoder, corrupt gzip
};
std::string_view body_usage_name(BodyUsage outcome);

class UsageInspector final : public BodyObserver {
 public:
  // `expression` outlives the inspector (the config holds it).
  UsageInspector(const UsageExpression& expression, std::size_t max_inspect_bytes);

  void response_head(unsigned status, std::string_view content_type,
                     std::string_view content_encoding) override;
  void response_body(std::string_view piece) override;
  void response_end() override;

  // The usage the body reported, when found; and what the reading came to.
  std::optional<double> usage() const;
  BodyUsage outcome() const;

 private:
  enum class Kind : std::uint8_t { kNone, kJson, kEvents, kUnreadable };
  void scan(std::string_view decoded);
  bool scanning() const;

  const UsageExpression& expression_;
  std::size_t max_bytes_;
  Kind kind_ = Kind::kNone;
  std::optional<JsonUsageScanner> json_;
  std::optional<SseUsageScanner> events_;
  std::unique_ptr<Inflater> inflater_;
};

}  // namespace sluice::usage
