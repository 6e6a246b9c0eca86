// The cost of one request on a route: the route's `cost`, or the number its
// `cost_header` carries, clamped to `max_cost`. Pure functions, no I/O.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "gateway/config/config.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/rate_limiter.hpp"
#include "middleware/ratelimit/request_view.hpp"

namespace sluice {

// More digits than this read as a number larger than any max_cost.
inline constexpr std::size_t kMaxCostDigits = 15;

// The integer a cost header value carries: decimal digits only (no sign,
// fraction, exponent or inner space; surrounding spaces ignored; leading
// zeros allowed), at least 1. A longer run of digits than kMaxCostDigits is
// read as 1e15. nullopt: not such an integer (empty, "abc", "-3", "2.5", "0").
std::optional<double> parse_cost_value(std::string_view text);

// The largest cost a request on `route` may carry: max_cost, or when it is 0
// the smallest capacity of the enforced (not shadow) `limits` (the request's buckets, at its plan).
double max_request_cost(const RouteConfig& route, std::span<const LimitDescriptor> limits);

// The cost of the request: without a cost_header on the route, or with its
// value (`header_value`, the first line) missing or not an integer >= 1, the
// route's cost; else that integer, at most max_request_cost.
double request_cost(const RouteConfig& route, std::optional<std::string_view> header_value,
                    std::span<const LimitDescriptor> limits);

// A route's estimate from the request body (cost: {from_body: ...}): the
// first of its paths that holds a number of at least 1 (rounded up), else
// its default (`cost`); plus, with add_prompt_estimate, the body's length /
// bytes_per_token rounded up; at most max_request_cost.
double body_estimate(const RouteConfig& route, const RequestView& request,
                     std::span<const LimitDescriptor> limits);

// The same with the value read from `request` (the first line of the
// header), or the body's estimate on a route with cost.from_body.
double request_cost(const RouteConfig& route, const RequestView& request,
                    std::span<const LimitDescriptor> limits);

// A request with more than one line of the route's cost_header is refused,
// as a repeated key source is: which line counts would be a guess.
std::optional<KeyRefusal> check_cost_header(const RouteConfig& route, const RequestView& request);

}  // namespace sluice
