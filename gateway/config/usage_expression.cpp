#include "gateway/config/usage_expression.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace sluice::usage {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool member_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

}  // namespace

bool parse_member_path(std::string_view text, std::vector<std::string>& path, std::string& error) {
  path.clear();
  while (true) {
    const std::size_t dot = text.find('.');
    const std::string_view member = text.substr(0, dot);
    if (member.empty() || member.size() > kMaxMemberBytes ||
        !std::all_of(member.begin(), member.end(), member_char)) {
      error = "a path is member names (letters, digits, _ and -, at most 64 bytes each) "
              "joined by dots";
      return false;
    }
    path.emplace_back(member);
    if (dot == std::string_view::npos) break;
    text.remove_prefix(dot + 1);
  }
  if (path.size() > kMaxPathLength) {
    error = "a path is at most 8 members deep";
    return false;
  }
  return true;
}

std::size_t UsageExpression::max_path_length() const {
  std::size_t n = 0;
  for (const auto& term : terms) n = std::max(n, term.path.size());
  return n;
}

std::optional<UsageExpression> parse_usage_expression(std::string_view text, std::string& error) {
  UsageExpression expression;
  while (true) {
    const std::size_t plus = text.find('+');
    std::string_view term_text = trim(text.substr(0, plus));
    UsageTerm term;
    if (const std::size_t star = term_text.find('*'); star != std::string_view::npos) {
      const std::string_view weight = trim(term_text.substr(0, star));
      const auto [end, ec] =
          std::from_chars(weight.data(), weight.data() + weight.size(), term.weight);
      if (weight.empty() || ec != std::errc{} || end != weight.data() + weight.size() ||
          !std::isfinite(term.weight) || term.weight <= 0) {
        error = "a weight is a number above 0, written before its path: 4 * usage.output_tokens";
        return std::nullopt;
      }
      term_text = trim(term_text.substr(star + 1));
    }
    if (!parse_member_path(term_text, term.path, error)) return std::nullopt;
    expression.terms.push_back(std::move(term));
    if (plus == std::string_view::npos) break;
    text.remove_prefix(plus + 1);
  }
  if (expression.terms.size() > kMaxTerms) {
    error = "at most 8 terms";
    return std::nullopt;
  }
  return expression;
}

bool add_alternative(UsageExpression& into, UsageExpression next) {
  if (into.terms.size() + next.terms.size() > kMaxTerms) return false;
  if (into.ends.empty() && !into.terms.empty()) into.ends.push_back(into.terms.size());
  for (auto& term : next.terms) into.terms.push_back(std::move(term));
  into.ends.push_back(into.terms.size());
  return true;
}

}  // namespace sluice::usage
