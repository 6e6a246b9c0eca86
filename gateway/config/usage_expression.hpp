// What a response body's usage is (cost_from_response.body): one JSON path
// (`usage.total_tokens`), or a sum of them, each maybe weighted
// (`usage.input_tokens + 4 * usage.output_tokens`). A path names object
// members from the document's root, separated by dots. Pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::usage {

struct UsageTerm {
  double weight = 1;
  std::vector<std::string> path;  // object member names from the root
};

struct UsageExpression {
  std::vector<UsageTerm> terms;
  // Alternatives (a body shaped one way or another: a JSON answer's
  // `usage.total_tokens`, a stream's `response.usage.total_tokens`): the end
  // of each one's terms in `terms`, in order; the first whose terms are all
  // found is the usage. Empty: one, all the terms.
  std::vector<std::size_t> ends;
  // The longest path: deeper members are never looked at.
  std::size_t max_path_length() const;
};

// The paths' members are 1 to kMaxMemberBytes bytes, at most kMaxPathLength
// deep, at most kMaxTerms terms (all alternatives together); a weight is a finite number above 0.
inline constexpr std::size_t kMaxMemberBytes = 64;
inline constexpr std::size_t kMaxPathLength = 8;
inline constexpr std::size_t kMaxTerms = 8;

// "usage.total_tokens" -> {"usage", "total_tokens"}: member names (letters,
// digits, _ and -, 1 to kMaxMemberBytes bytes each) joined by single dots,
// at most kMaxPathLength deep; false (and why) for anything else.
bool parse_member_path(std::string_view text, std::vector<std::string>& path, std::string& error);

// Parses `text`, or says why it cannot (`error`).
std::optional<UsageExpression> parse_usage_expression(std::string_view text, std::string& error);
// Appends `next` to `into` as its next alternative; false when the two have
// more than kMaxTerms terms together.
bool add_alternative(UsageExpression& into, UsageExpression next);

}  // namespace sluice::usage
