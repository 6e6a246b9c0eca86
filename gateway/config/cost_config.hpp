// What a request costs beyond a number: the estimate read from its JSON
// body (routes[].cost as a mapping), and the real cost settled from its
// response (routes[].cost_from_response). Plain structs of the config.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gateway/config/usage_expression.hpp"

namespace sluice {

// The estimate read from the JSON request body (routes[].cost: {from_body: ...}).
struct RequestBodyCost {
  // Tried in order: the first that holds a number (>= 1) is the estimate,
  // else the route's cost (the mapping's default) is.
  std::vector<std::string> paths;
  // Adds the body's length / bytes_per_token (the prompt's tokens, roughly).
  bool add_prompt_estimate = false;
  double bytes_per_token = 4;
};

// How a route reads its JSON request body before the decision.
struct RequestBodyConfig {
  static constexpr std::size_t kDefaultMaxInspectBytes = 1024 * 1024;
  // routes[].cost as a mapping: the estimate from the body; none: `cost`, or
  // cost_header's value.
  std::optional<RequestBodyCost> cost;
  // routes[].max_inspect_bytes: how much of the body is read, at most.
  std::size_t max_inspect_bytes = kDefaultMaxInspectBytes;
  // The member paths the route's limits (body: key parts) and cost read, set
  // by the second pass.
  std::vector<std::string> fields;
  // The body is read ahead when a member of it is read, or its length.
  bool read_ahead() const { return !fields.empty() || (cost && cost->add_prompt_estimate); }
};

// A route's cost settled from the response: the estimate (cost or
// cost_header) is debited at admission, and the difference to the real cost,
// read from a response header or trailer, settled when the response ends.
struct CostFromResponse {
  // Reads more of a JSON body (or of an event's data) than any usage needs.
  static constexpr std::size_t kDefaultMaxInspectBytes = 1024 * 1024;

  std::string header;  // empty: none
  // The usage read from a JSON or text/event-stream response body as it
  // passes (middleware/ratelimit/usage/); none: the body is not read.
  std::optional<usage::UsageExpression> body;
  std::string body_text;  // `body` as written
  // How far into a JSON body, or into one event's data, a usage is looked for.
  std::size_t max_inspect_bytes = kDefaultMaxInspectBytes;
  // Statuses whose response costs what the header says (inclusive ranges);
  // others cost 0 (the estimate is refunded). Empty: every status.
  std::vector<std::pair<unsigned, unsigned>> statuses;
  // How far below empty a settlement may push a limit.
  double max_debt = 0;
  // A header, a body, or both (the header's valid value wins).
  bool enabled() const { return !header.empty() || body.has_value(); }
  bool counts(unsigned status) const;
};

}  // namespace sluice
