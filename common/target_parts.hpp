// The two parts of a request-target: the path before the first '?' and the
// query after it. The one place that cuts a target there; header-only, pure,
// and the parts view the target (no copy).
#pragma once

#include <string_view>

namespace sluice {

struct TargetParts {
  std::string_view path;   // before the first '?'; the whole target when there is none
  std::string_view query;  // after the first '?', without it; empty when there is none
};

// Cuts `target` at its first '?'. `target.substr(path.size())` is the '?' and
// the query as received ("" when the target has no '?', "?" for "/a?").
constexpr TargetParts split_target(std::string_view target) {
  const auto mark = target.find('?');
  if (mark == std::string_view::npos) return {target, {}};
  return {target.substr(0, mark), target.substr(mark + 1)};
}

}  // namespace sluice
