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
// cost no memory beyond the scanner's and one unended event's first bytes.
//
// Most events hold no usage (OpenAI's chunks carry "usage":null, Anthropic's
// deltas none): a stream whose lines end with LF alone is cut into events at
// its blank lines, and only an event that names a path's first member
// (`"usage"`, written as is: an escaped name never matches) with a value
// other than null goes through the scanners; the others are passed over at
// the speed of a memory search. The event a piece leaves unended is kept (up
// to about max_event_bytes; past that it is skipped to its end, and counted)
// until the next piece ends it. A stream with a CR anywhere is read byte by
// byte from there on. Pure.
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
  // Events whose data the scanners read.
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
  // Every byte through the line machine (a stream with CR line ends).
  void feed_lines(std::string_view piece);
  // LF-only: events cut at blank lines, read only when they may hold a usage.
  void feed_events(std::string_view piece);
  // The next position at or after `from` where a path's first member is
  // named with a non-null value; npos when none.
  std::size_t next_hot(std::string_view piece, std::size_t from) const;
  // A whole event (ending with its blank line, or the stream's end).
  void whole_event(std::string_view event);
  // Keeps the unended event's bytes, up to the bound.
  void carry(std::string_view bytes);
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
  std::vector<std::string> hot_names_;  // each path's first member, quoted
  std::size_t max_carry_ = 0;
  bool exact_ = false;       // a CR came: feed_lines from there on
  std::string carry_;        // the unended event's bytes (LF-only)
  bool carry_over_ = false;  // it outgrew the bound: skipped to its end
  bool carried_lf_ = false;  // the last byte carried (or skipped) was LF
};

}  // namespace sluice::usage
