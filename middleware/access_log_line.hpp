// One access-log line as JSON text, built by hand (the line is written for
// every request: no document tree, one string). Every field is always present:
// the ten the log always had as strings ("" when they do not apply), the
// decision fields and trace_id null then; docs/operations.md lists them. Strings are
// escaped for JSON: quotes, backslashes and control characters escaped, and a
// byte that is not part of well-formed UTF-8 replaced by U+FFFD. Pure, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "gateway/middleware.hpp"

namespace sluice {

// Appends `text` as a JSON string (with its quotes) to `out`.
void append_json_string(std::string& out, std::string_view text);

// The line for `summary` at `unix_ms` (the ts field), ending in '\n'.
std::string access_log_line(const ExchangeSummary& summary, std::int64_t unix_ms);
// The same line appended to `out` (a log's buffer of lines to write).
void append_access_log_line(std::string& out, const ExchangeSummary& summary,
                            std::int64_t unix_ms);

}  // namespace sluice
