// Members of a JSON request body read before its request is decided: the
// model (a body:model key part), max_tokens (the estimate of cost.from_body).
// The body read so far (up to routes[].max_inspect_bytes) is parsed as JSON
// with nlohmann's event parser, which keeps no document: members are taken
// as they pass, and the parse stops once the body ends, breaks, or nests
// deeper than kMaxBodyDepth. Pure.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::usage {

inline constexpr std::size_t kMaxBodyDepth = 64;
// A longer string value is not taken (a model name, a user id are short).
inline constexpr std::size_t kMaxFieldValueBytes = 1024;

struct BodyField {
  std::string path;
  std::string value;    // a string's value, or a number's JSON text
  bool number = false;  // a JSON number (a string "12" is not one)
};
using BodyFields = std::vector<BodyField>;

// The values of `paths` (member names from the root object joined by dots,
// never through an array) in `body`, appended to `out`. A member holding anything else
// (true, null, an object, a longer string) is left out; a member given twice
// counts its last value, as the servers behind read it. A body that is not
// JSON, or is cut short, gives what came before the break.
void read_body_fields(std::string_view body, std::span<const std::string> paths, BodyFields& out);

// The value at `path` among `fields`, whatever its type; null when none.
const BodyField* body_field(const BodyFields& fields, std::string_view path);
// The number at `path` among `fields` when it is a JSON number, finite and
// not negative; nullopt otherwise (absent, a string, -1, 1e400).
std::optional<double> body_number(const BodyFields& fields, std::string_view path);

}  // namespace sluice::usage
