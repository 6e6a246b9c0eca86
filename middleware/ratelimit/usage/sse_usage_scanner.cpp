#include "middleware/ratelimit/usage/sse_usage_scanner.hpp"

namespace sluice::usage {
namespace {

constexpr std::size_t kMaxFieldBytes = 16;

}  // namespace

SseUsageScanner::SseUsageScanner(const UsageExpression& expression, std::size_t max_event_bytes)
    : event_(expression, max_event_bytes), found_(expression.terms.size()) {
  field_.reserve(kMaxFieldBytes);
}

void SseUsageScanner::feed(std::string_view piece) {
  for (std::size_t i = 0; i < piece.size(); ++i) {
    const char c = piece[i];
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // "\r\n" ends one line
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      end_line();
      continue;
    }
    switch (line_) {
      case Line::kStart:
        line_ = Line::kField;
        field_.clear();
        [[fallthrough]];
      case Line::kField:
        if (c == ':') {
          line_ = field_ == "data" ? Line::kSpace : Line::kSkip;
        } else if (field_.size() == kMaxFieldBytes) {
          line_ = Line::kSkip;
        } else {
          field_ += c;
        }
        break;
      case Line::kSpace:
        line_ = Line::kData;
        if (event_has_data_) event_.feed("\n");  // the lines of one event's data
        event_has_data_ = true;
        if (c == ' ') break;
        [[fallthrough]];
      case Line::kData: {
        // The rest of the line at once (the scanner stops by itself past its bound).
        std::size_t end = i;
        while (end < piece.size() && piece[end] != '\r' && piece[end] != '\n') ++end;
        event_.feed(piece.substr(i, end - i));
        i = end - 1;
        break;
      }
      case Line::kSkip:
        break;
    }
  }
}

void SseUsageScanner::end_line() {
  if (line_ == Line::kStart) return dispatch();  // a blank line ends the event
  if (line_ == Line::kField && field_ == "data") {
    // "data" alone: an empty data line.
    if (event_has_data_) event_.feed("\n");
    event_has_data_ = true;
  } else if (line_ == Line::kSpace) {
    if (event_has_data_) event_.feed("\n");
    event_has_data_ = true;
  }
  line_ = Line::kStart;
}

void SseUsageScanner::dispatch() {
  if (!event_has_data_) return;
  ++events_;
  if (event_.truncated()) ++truncated_events_;
  const auto got = event_.found();
  for (std::size_t i = 0; i < found_.size(); ++i) {
    if (got[i].state != TermState::kNotSeen) found_[i] = got[i];
  }
  event_.reset();
  event_has_data_ = false;
}

void SseUsageScanner::finish() {
  if (line_ != Line::kStart) end_line();
  dispatch();
}

}  // namespace sluice::usage
