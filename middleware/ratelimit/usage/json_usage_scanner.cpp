#include "middleware/ratelimit/usage/json_usage_scanner.hpp"

#include <charconv>
#include <cstring>
#include <cmath>

namespace sluice::usage {
namespace {

bool whitespace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool number_char(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

}  // namespace

std::optional<double> usage_total(const UsageExpression& expression,
                                  std::span<const TermValue> found) {
  if (found.size() != expression.terms.size() || found.empty()) return std::nullopt;
  std::size_t begin = 0;
  const std::size_t one[] = {found.size()};
  const std::span<const std::size_t> ends =
      expression.ends.empty() ? std::span<const std::size_t>(one) : expression.ends;
  for (const std::size_t end : ends) {
    double total = 0;
    bool whole = true;
    for (std::size_t i = begin; i < end && whole; ++i) {
      whole = found[i].state == TermState::kValid;
      total += expression.terms[i].weight * found[i].value;
    }
    begin = end;
    if (whole && std::isfinite(total)) return total;
  }
  return std::nullopt;
}

JsonUsageScanner::JsonUsageScanner(const UsageExpression& expression, std::size_t max_bytes)
    : expression_(expression), max_bytes_(max_bytes), found_(expression.terms.size()) {
  stack_.reserve(kMaxDepth);
  token_.reserve(kMaxMemberBytes);
}

void JsonUsageScanner::reset() {
  seen_ = 0;
  state_ = State::kValue;
  stack_.clear();
  token_.clear();
  value_mask_ = child_mask_ = 0;
  skip_depth_ = 0;
  truncated_ = false;
  for (auto& term : found_) term = TermValue{};
}

void JsonUsageScanner::feed(std::string_view piece) {
  if (state_ == State::kStopped || state_ == State::kDone) return;
  // Bytes past the bound are not looked at.
  const std::size_t room = max_bytes_ - std::min(seen_, max_bytes_);
  const bool over = piece.size() > room;
  if (over) piece = piece.substr(0, room);
  seen_ += piece.size();
  const char* p = piece.data();
  const char* const end = p + piece.size();
  while (p < end && state_ != State::kStopped && state_ != State::kDone) {
    if (state_ == State::kString || state_ == State::kSkipString) {
      p = scan_string(p, end);
    } else if (state_ == State::kSkip) {
      p = skip_value(p, end);
    } else if (step(*p)) {
      ++p;  // else the byte is seen again in the new state
    }
  }
  if (over && state_ != State::kDone && state_ != State::kStopped) {
    truncated_ = true;
    stop();
  }
}

const char* JsonUsageScanner::scan_string(const char* p, const char* end) {
  const bool skipping = state_ == State::kSkipString;
  const auto* quote = static_cast<const char*>(std::memchr(p, '"', static_cast<std::size_t>(end - p)));
  const char* until = quote ? quote : end;
  const auto* escape =
      static_cast<const char*>(std::memchr(p, '\\', static_cast<std::size_t>(until - p)));
  if (escape) {
    state_ = skipping ? State::kSkipStringEscape : State::kStringEscape;
    return escape + 1;
  }
  if (!quote) return end;
  if (!skipping) {
    scalar_done(false, 0);  // a string where a path ends is no number ("12")
  } else {
    state_ = skip_depth_ == 0 ? State::kAfterValue : State::kSkip;
  }
  return quote + 1;
}

const char* JsonUsageScanner::skip_value(const char* p, const char* end) {
  for (; p < end; ++p) {
    switch (*p) {
      case '"':
        state_ = State::kSkipString;
        return p + 1;
      case '{':
      case '[':
        ++skip_depth_;
        break;
      case '}':
      case ']':
        if (skip_depth_ == 0) {  // a scalar's end: its container closes
          state_ = State::kAfterValue;
          return p;
        }
        if (--skip_depth_ == 0) {
          state_ = State::kAfterValue;
          return p + 1;
        }
        break;
      case ',':
        if (skip_depth_ == 0) {
          state_ = State::kAfterValue;
          return p;
        }
        break;
      default:
        break;
    }
  }
  return p;
}

void JsonUsageScanner::set_terms(Mask mask, TermState state, double value) {
  for (std::size_t i = 0; i < found_.size(); ++i) {
    if (mask & (1u << i)) found_[i] = {state, value};
  }
}

void JsonUsageScanner::open(bool object) {
  if (stack_.size() == kMaxDepth) return stop();
  // An object or array where a path ends is no number.
  set_terms(value_mask_, TermState::kInvalid, 0);
  Mask mask = 0;
  if (object) {
    // The root object: every path starts in it.
    mask = stack_.empty() ? static_cast<Mask>((1u << expression_.terms.size()) - 1) : child_mask_;
  }
  stack_.push_back({object, mask});
  value_mask_ = child_mask_ = 0;
  state_ = object ? State::kFirstMember : State::kValue;
}

bool JsonUsageScanner::close(char c) {
  if (stack_.empty() || stack_.back().object != (c == '}')) {
    stop();
    return true;
  }
  stack_.pop_back();
  value_mask_ = child_mask_ = 0;
  state_ = stack_.empty() ? State::kDone : State::kAfterValue;
  return true;
}

// A member name was read: which paths it continues, and which end at it.
void JsonUsageScanner::name_done() {
  value_mask_ = child_mask_ = 0;
  const std::size_t depth = stack_.size();
  const Mask through = stack_.back().mask;
  if (name_matchable_ && through != 0) {
    for (std::size_t i = 0; i < expression_.terms.size(); ++i) {
      const auto& path = expression_.terms[i].path;
      if (!(through & (1u << i)) || path.size() < depth || path[depth - 1] != token_) continue;
      (path.size() == depth ? value_mask_ : child_mask_) |= static_cast<Mask>(1u << i);
    }
  }
  // A member seen again replaces the first: what its value holds counts, as
  // if the first were not there.
  set_terms(child_mask_, TermState::kNotSeen, 0);
  token_.clear();
  state_ = State::kColon;
}

void JsonUsageScanner::scalar_done(bool number_ok, double value) {
  set_terms(value_mask_, number_ok ? TermState::kValid : TermState::kInvalid, value);
  value_mask_ = child_mask_ = 0;
  state_ = stack_.empty() ? State::kDone : State::kAfterValue;
}

void JsonUsageScanner::number_done() {
  double value = 0;
  bool ok = token_.size() <= kMaxNumberBytes;
  if (ok) {
    const auto [end, ec] = std::from_chars(token_.data(), token_.data() + token_.size(), value);
    ok = ec == std::errc{} && end == token_.data() + token_.size() && std::isfinite(value) &&
         value >= 0 && token_.front() != '+';
  }
  token_.clear();
  scalar_done(ok, value);
}

void JsonUsageScanner::literal_done() {
  const bool known = token_ == "true" || token_ == "false" || token_ == "null";
  token_.clear();
  if (!known) return stop();
  scalar_done(false, 0);
}

bool JsonUsageScanner::step(char c) {
  switch (state_) {
    case State::kValue:
      if (whitespace(c)) return true;
      if (value_mask_ == 0 && child_mask_ == 0 && !stack_.empty()) {
        // No path goes through this value: skipped, fast.
        skip_depth_ = 0;
        state_ = State::kSkip;
        return false;
      }
      if (c == '{' || c == '[') {
        open(c == '{');
        return true;
      }
      if (c == ']' && !stack_.empty() && !stack_.back().object) return close(c);  // []
      if (c == '"') {
        state_ = State::kString;
        return true;
      }
      if (number_char(c)) {
        state_ = State::kNumber;
        return false;
      }
      if (c >= 'a' && c <= 'z') {
        state_ = State::kLiteral;
        return false;
      }
      stop();
      return true;
    case State::kFirstMember:
    case State::kMember:
      if (whitespace(c)) return true;
      if (c == '}' && state_ == State::kFirstMember) return close(c);
      if (c != '"') {
        stop();
        return true;
      }
      name_matchable_ = true;
      state_ = State::kName;
      return true;
    case State::kName:
      if (c == '"') {
        name_done();
        return true;
      }
      if (c == '\\') {
        // Escaped names never match: the paths are plain ASCII.
        name_matchable_ = false;
        state_ = State::kNameEscape;
        return true;
      }
      if (token_.size() == kMaxMemberBytes) {
        name_matchable_ = false;
      } else {
        token_ += c;
      }
      return true;
    case State::kNameEscape:
      state_ = State::kName;  // (a \uXXXX's digits are read as the name's)
      return true;
    case State::kColon:
      if (whitespace(c)) return true;
      if (c != ':') {
        stop();
        return true;
      }
      state_ = State::kValue;
      return true;
    case State::kAfterValue:
      if (whitespace(c)) return true;
      if (c == ',') {
        state_ = stack_.back().object ? State::kMember : State::kValue;
        return true;
      }
      if (c == '}' || c == ']') return close(c);
      stop();
      return true;
    case State::kString:
    case State::kSkipString:
    case State::kSkip:
      return true;  // (feed's fast paths read these)
    case State::kStringEscape:
      state_ = State::kString;
      return true;
    case State::kSkipStringEscape:
      state_ = State::kSkipString;
      return true;
    case State::kNumber:
      if (number_char(c)) {
        if (token_.size() <= kMaxNumberBytes) token_ += c;  // longer: invalid, still read
        return true;
      }
      number_done();
      return false;  // the byte after the number is seen again
    case State::kLiteral:
      if (c >= 'a' && c <= 'z' && token_.size() < 5) {
        token_ += c;
        return true;
      }
      literal_done();
      return false;
    case State::kDone:
    case State::kStopped:
      return true;
  }
  return true;
}

}  // namespace sluice::usage
