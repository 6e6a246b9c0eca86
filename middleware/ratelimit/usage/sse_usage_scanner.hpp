// The values of a usage expression's paths in a text/event-stream response
// (OpenAI's streamed chat completions with include_usage, Anthropic's
// Messages events), fed in pieces as the stream passes, never buffered: each
// event's data lines (joined by "\n", as the format says) go through a JSON
// scanner of their own, bounded by max_event_bytes from the event's start
// (past it the event's rest is skipped, and counted). Across events each
// term keeps the last value seen: OpenAI's last chunk carries the usage, and
// Anthropic's input tokens come in message_start (message.usage.input_tokens)
// and its output tokens, counted so far, in each message_delta
// (usage.output_tokens). Lines of any length, and events that never end,
// cost no memory beyond the scanner's. Pure.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "middleware/ratelimit/usage/json_usage_scanner.hpp"

namespace sluice::usage {

class SseUsageScanner {
 public:
  SseUsageScanner(const UsageExpression& expression, std::size_t max_event_bytes);

  void feed(std::string_view piece);
  // The stream ended: an event not closed by a blank line still counts.
  void finish();

  std::span<const TermValue> found() const { return found_; }
  std::size_t events() const { return events_; }
  // Events whose data went past max_event_bytes.
  std::size_t truncated_events() const { return truncated_events_; }

 private:
  enum class Line : std::uint8_t {
    kStart,      // at a line's first byte
    kField,      // reading the field name
    kSpace,      // after "data:", an optional space
    kData,       // the data line's value, into the event's scanner
    kSkip,       // another field, a comment, or a name too long: to the line's end
  };
  void end_line();
  void dispatch();

  JsonUsageScanner event_;
  std::vector<TermValue> found_;
  Line line_ = Line::kStart;
  std::string field_;  // at most kMaxFieldBytes
  bool after_cr_ = false;
  bool event_has_data_ = false;
  std::size_t events_ = 0;
  std::size_t truncated_events_ = 0;
};

}  // namespace sluice::usage
