#include "middleware/ratelimit/usage/sse_usage_scanner.hpp"

#include <algorithm>
#include <cstring>

namespace sluice::usage {
namespace {

constexpr std::size_t kMaxFieldBytes = 16;
// `needle` in `hay` from `from` on (glibc's memmem: far faster than a
// string_view's find); npos when absent.
std::size_t find_in(std::string_view hay, std::string_view needle, std::size_t from) {
  if (from >= hay.size()) return std::string_view::npos;
  const void* at = memmem(hay.data() + from, hay.size() - from, needle.data(), needle.size());
  return at ? static_cast<std::size_t>(static_cast<const char*>(at) - hay.data())
            : std::string_view::npos;
}

// An unended event is kept up to max_event_bytes of data plus this much of
// field names and other lines.
constexpr std::size_t kCarryMargin = 4096;

// Where the line that `from` is in ends in `piece`: its first CR or LF at or
// after `from`, else the piece's end.
std::size_t line_end(std::string_view piece, std::size_t from) {
  const char* p = piece.data() + from;
  const std::size_t n = piece.size() - from;
  const auto* lf = static_cast<const char*>(std::memchr(p, '\n', n));
  const std::size_t until = lf ? static_cast<std::size_t>(lf - p) : n;
  const auto* cr = static_cast<const char*>(std::memchr(p, '\r', until));
  return from + (cr ? static_cast<std::size_t>(cr - p) : until);
}

}  // namespace

SseUsageScanner::SseUsageScanner(const UsageExpression& expression, std::size_t max_event_bytes)
    : event_(expression, max_event_bytes),
      found_(expression.terms.size()),
      max_carry_(max_event_bytes + kCarryMargin) {
  field_.reserve(kMaxFieldBytes);
  for (const auto& term : expression.terms) {
    std::string name = "\"" + term.path.front() + "\"";
    if (std::find(hot_names_.begin(), hot_names_.end(), name) == hot_names_.end()) {
      hot_names_.push_back(std::move(name));
    }
  }
}

void SseUsageScanner::feed(std::string_view piece) {
  if (piece.empty()) return;
  if (!exact_ && std::memchr(piece.data(), '\r', piece.size())) {
    // CR line ends: the line machine reads every byte from here, starting
    // with the unended event's (it begins at a line's start).
    exact_ = true;
    if (!carry_over_) feed_lines(carry_);
    std::string().swap(carry_);
  }
  if (exact_) return feed_lines(piece);
  feed_events(piece);
}

void SseUsageScanner::feed_events(std::string_view piece) {
  std::size_t pos = 0;
  if (!carry_.empty() || carry_over_) {
    // The unended event ends at the first blank line, maybe straddling.
    std::size_t end = std::string_view::npos;
    if (carried_lf_ && piece.front() == '\n') {
      end = 1;
    } else if (const auto at = find_in(piece, "\n\n", 0); at != std::string_view::npos) {
      end = at + 2;
    }
    if (end == std::string_view::npos) return carry(piece);
    carry(piece.substr(0, end));
    if (!carry_over_) whole_event(carry_);
    carry_.clear();
    carry_over_ = carried_lf_ = false;
    pos = end;
  }
  while (pos < piece.size()) {
    const std::size_t hot = next_hot(piece, pos);
    if (hot == std::string_view::npos) break;
    // The event around it: from the blank line before (or pos) to the one after.
    const std::size_t before = piece.rfind("\n\n", hot);
    const std::size_t start = before == std::string_view::npos || before < pos ? pos : before + 2;
    const std::size_t after = find_in(piece, "\n\n", hot);
    if (after == std::string_view::npos) return carry(piece.substr(start));
    whole_event(piece.substr(start, after + 2 - start));
    pos = after + 2;
  }
  // No event left that may hold a usage: the unended one, if any, is kept.
  const std::size_t last = piece.rfind("\n\n");
  const std::size_t tail = last == std::string_view::npos || last + 2 < pos ? pos : last + 2;
  if (tail < piece.size()) carry(piece.substr(tail));
}

std::size_t SseUsageScanner::next_hot(std::string_view piece, std::size_t from) const {
  std::size_t best = std::string_view::npos;
  for (const auto& name : hot_names_) {
    for (std::size_t at = find_in(piece, name, from); at < best && at != std::string_view::npos;
         at = find_in(piece, name, at + 1)) {
      // A member named so: its value follows the colon; null holds nothing.
      std::size_t i = at + name.size();
      while (i < piece.size() && (piece[i] == ' ' || piece[i] == '\t')) ++i;
      // (A line break: the colon may be on the event's next data line.)
      if (i < piece.size() && piece[i] != ':' && piece[i] != '\n') continue;  // a string value
      ++i;
      while (i < piece.size() && (piece[i] == ' ' || piece[i] == '\t')) ++i;
      if (i < piece.size() && piece[i] == 'n') continue;
      best = at;  // (at a piece's end: maybe, so yes)
      break;
    }
  }
  return best;
}

void SseUsageScanner::whole_event(std::string_view event) {
  if (next_hot(event, 0) == std::string_view::npos) return;
  feed_lines(event);
  if (line_ != Line::kStart) end_line();
  dispatch();
}

void SseUsageScanner::carry(std::string_view bytes) {
  if (bytes.empty()) return;
  if (!carry_over_ && carry_.size() + bytes.size() > max_carry_) {
    // An event longer than any usage is looked for in: skipped to its end.
    carry_over_ = true;
    ++truncated_events_;
    std::string().swap(carry_);
  }
  if (!carry_over_) carry_.append(bytes);
  carried_lf_ = bytes.back() == '\n';
}

void SseUsageScanner::feed_lines(std::string_view piece) {
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
        const std::size_t end = line_end(piece, i);
        event_.feed(piece.substr(i, end - i));
        i = end - 1;
        break;
      }
      case Line::kSkip:
        i = line_end(piece, i) - 1;  // to the line's end at once
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
  if (!exact_ && !carry_over_ && !carry_.empty()) {
    whole_event(carry_);  // an event the stream's end ended
    std::string().swap(carry_);
    return;
  }
  if (line_ != Line::kStart) end_line();
  dispatch();
}

}  // namespace sluice::usage
