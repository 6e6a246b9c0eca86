#include "middleware/ratelimit/request_cost.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/ascii.hpp"
#include "middleware/ratelimit/algorithms/algorithm.hpp"

namespace sluice {

std::optional<double> parse_cost_value(std::string_view text) {
  text = ascii::trim(text);
  if (text.empty() || !ascii::all_digits(text)) return std::nullopt;
  const auto first = text.find_first_not_of('0');
  if (first == std::string_view::npos) return std::nullopt;  // zero
  text.remove_prefix(first);
  if (text.size() > kMaxCostDigits) return 1e15;
  double value = 0;
  for (char c : text) value = value * 10 + (c - '0');  // exact below 2^53
  return value;
}

double max_request_cost(const RouteConfig& route, std::span<const LimitDescriptor> limits) {
  if (route.max_cost > 0) return route.max_cost;
  double smallest = std::numeric_limits<double>::infinity();
  // Shadow limits leave the enforced ones as they would be without them.
  for (const auto& limit : limits) {
    // A concurrency limit takes one slot, whatever the cost.
    if (!limit.shadow && algorithm_row(limit).counts_cost) {
      smallest = std::min(smallest, limit.capacity);
    }
  }
  return smallest;
}

double request_cost(const RouteConfig& route, std::optional<std::string_view> header_value,
                    std::span<const LimitDescriptor> limits) {
  if (route.cost_header.empty() || !header_value) return route.cost;
  const auto value = parse_cost_value(*header_value);
  if (!value) return route.cost;
  return std::min(*value, max_request_cost(route, limits));
}

double body_estimate(const RouteConfig& route, const RequestView& request,
                     std::span<const LimitDescriptor> limits) {
  const RequestBodyCost& body = *route.body.cost;
  double estimate = route.cost;
  if (request.body_fields) {
    for (const auto& path : body.paths) {
      const auto value = usage::body_number(*request.body_fields, path);
      if (value && *value >= 1) {
        estimate = std::ceil(*value);
        break;
      }
    }
  }
  if (body.add_prompt_estimate && request.body_length) {
    estimate += std::ceil(static_cast<double>(*request.body_length) / body.bytes_per_token);
  }
  return std::min(estimate, max_request_cost(route, limits));
}

double request_cost(const RouteConfig& route, const RequestView& request,
                    std::span<const LimitDescriptor> limits) {
  if (route.body.cost) return body_estimate(route, request, limits);
  if (route.cost_header.empty()) return route.cost;
  return request_cost(route, lookup_header(request, route.cost_header), limits);
}

std::optional<KeyRefusal> check_cost_header(const RouteConfig& route, const RequestView& request) {
  if (route.cost_header.empty() || count_header(request, route.cost_header) <= 1) {
    return std::nullopt;
  }
  return KeyRefusal{KeyRefusal::Reason::kDuplicateIdentity,
                    "more than one " + route.cost_header + " header"};
}

}  // namespace sluice
