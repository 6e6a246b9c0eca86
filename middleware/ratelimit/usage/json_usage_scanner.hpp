// The values of a usage expression's paths (usage_expression.hpp) in one
// JSON document fed in pieces as it passes (a response body relayed, an
// event's data), never buffered: a bounded state (a stack of at most
// kMaxDepth containers, a member name of at most kMaxMemberBytes, a number
// of at most kMaxNumberBytes). Deeper documents, malformed ones and bytes
// past max_bytes stop the scan; what was found before stays found. A member
// value no path goes through (an id, a message's text, an array) is skipped
// by its strings and brackets alone, fast and unchecked.
//
// A path's value counts when it is a JSON number, finite and not negative,
// of at most kMaxNumberBytes characters; anything else there (a string, null,
// a negative or overlong number, an object) makes the term invalid. A member
// seen twice: the last one wins. Pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/config/usage_expression.hpp"

namespace sluice::usage {

inline constexpr std::size_t kMaxDepth = 64;
inline constexpr std::size_t kMaxNumberBytes = 32;

enum class TermState : std::uint8_t { kNotSeen, kValid, kInvalid };

struct TermValue {
  TermState state = TermState::kNotSeen;
  double value = 0;
};

// The expression's value: the weighted sum of the terms of its first
// alternative whose terms were all found valid; none when no alternative's
// were (the settlement then falls back to the estimate).
std::optional<double> usage_total(const UsageExpression& expression,
                                  std::span<const TermValue> found);

class JsonUsageScanner {
 public:
  // `expression` outlives the scanner.
  JsonUsageScanner(const UsageExpression& expression, std::size_t max_bytes);

  void feed(std::string_view piece);
  // Ready for another document (the found values are forgotten).
  void reset();

  // Per term of the expression, in order.
  std::span<const TermValue> found() const { return found_; }
  // The document could not be read to its end: malformed, too deep, or
  // longer than max_bytes (truncated()).
  bool stopped() const { return state_ == State::kStopped; }
  bool truncated() const { return truncated_; }
  // A whole top-level value was read.
  bool complete() const { return state_ == State::kDone; }

 private:
  enum class State : std::uint8_t {
    kValue,        // a value is next
    kFirstMember,  // after '{': a member name or '}'
    kMember,       // after ',' in an object: a member name
    kName,         // in a member name
    kNameEscape,
    kColon,
    kAfterValue,   // ',' or the container's end
    kString,       // in a string value
    kStringEscape,
    kNumber,
    kLiteral,      // true, false, null
    kSkip,         // in a value no path goes through, skip_depth_ containers deep
    kSkipString,   // in a string of such a value
    kSkipStringEscape,
    kDone,
    kStopped,
  };
  using Mask = std::uint8_t;  // a bit per term (kMaxTerms = 8)
  struct Frame {
    bool object = false;
    Mask mask = 0;  // the terms whose paths go through this object's members
  };

  // Processes one byte; false when it must be seen again in the new state.
  bool step(char c);
  // The fast paths: a string's bytes up to its closing quote or a
  // backslash, and a skipped value's up to its end. Each returns where it
  // stopped in [p, end).
  const char* scan_string(const char* p, const char* end);
  const char* skip_value(const char* p, const char* end);
  void open(bool object);
  bool close(char c);
  void name_done();
  void scalar_done(bool number_ok, double value);
  void number_done();
  void literal_done();
  void stop() { state_ = State::kStopped; }
  void set_terms(Mask mask, TermState state, double value);

  const UsageExpression& expression_;
  std::size_t max_bytes_;
  std::size_t seen_ = 0;
  State state_ = State::kValue;
  std::vector<Frame> stack_;  // reserved: at most kMaxDepth
  std::string token_;         // a member name, number or literal being read
  bool name_matchable_ = true;
  std::size_t skip_depth_ = 0;  // containers open in a skipped value
  Mask value_mask_ = 0;  // the terms whose path ends at the value being read
  Mask child_mask_ = 0;  // the terms whose path goes on inside it
  std::vector<TermValue> found_;
  bool truncated_ = false;
};

}  // namespace sluice::usage
