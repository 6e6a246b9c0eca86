#include "middleware/access_log_line.hpp"

#include <cmath>
#include <ctime>

#include <fmt/format.h>

#include "common/target_parts.hpp"

namespace sluice {
namespace {

// The length of the well-formed UTF-8 sequence starting at text[i] (1 to 4),
// or 0 when the bytes there are not one (overlong forms, surrogates and code
// points above U+10FFFF included).
std::size_t utf8_sequence(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const auto continuation = [&](std::size_t k) {
    return i + k < text.size() && (byte(k) & 0xC0) == 0x80;
  };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return continuation(1) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (!continuation(1) || !continuation(2)) return 0;
    if (b0 == 0xE0 && byte(1) < 0xA0) return 0;   // overlong
    if (b0 == 0xED && byte(1) >= 0xA0) return 0;  // a surrogate
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (!continuation(1) || !continuation(2) || !continuation(3)) return 0;
    if (b0 == 0xF0 && byte(1) < 0x90) return 0;   // overlong
    if (b0 == 0xF4 && byte(1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

void append_field(std::string& out, std::string_view name) {
  out += out.size() == 1 ? "\"" : ",\"";
  out += name;
  out += "\":";
}

void append_string(std::string& out, std::string_view name, std::string_view value) {
  append_field(out, name);
  append_json_string(out, value);
}

void append_string_or_null(std::string& out, std::string_view name, std::string_view value) {
  append_field(out, name);
  if (value.empty()) {
    out += "null";
  } else {
    append_json_string(out, value);
  }
}

void append_number(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  fmt::format_to(std::back_inserter(out), "{}", value);
}

void append_optional(std::string& out, std::string_view name, const std::optional<double>& value) {
  append_field(out, name);
  if (value) {
    append_number(out, *value);
  } else {
    out += "null";
  }
}

}  // namespace

void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x80 && c != '"' && c != '\\') {
      out += c;
      ++i;
      continue;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
      ++i;
      continue;
    }
    if (u < 0x20) {
      switch (c) {
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default: fmt::format_to(std::back_inserter(out), "\\u{:04x}", u);
      }
      ++i;
      continue;
    }
    const std::size_t n = utf8_sequence(text, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD for the byte that starts no sequence
      ++i;
      continue;
    }
    out.append(text.substr(i, n));
    i += n;
  }
  out += '"';
}

std::string access_log_line(const ExchangeSummary& s, std::int64_t unix_ms) {
  std::string out;
  out.reserve(512);
  out += '{';
  std::time_t secs = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  append_field(out, "ts");
  fmt::format_to(std::back_inserter(out), "\"{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z\"",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 static_cast<int>(unix_ms % 1000));
  // The fields the log has always had are strings, "" when they do not apply;
  // the later ones are null then.
  append_string(out, "request_id", s.request_id);
  append_string_or_null(out, "trace_id", s.trace_id);
  append_field(out, "client_ip");
  append_json_string(out, s.client_ip.to_string());
  append_string(out, "method", s.method);
  append_string_or_null(out, "protocol", s.protocol);
  append_string(out, "path", split_target(s.target).path);
  append_string(out, "route", s.route);
  append_field(out, "status");
  fmt::format_to(std::back_inserter(out), "{}", s.status);
  append_field(out, "duration_ms");  // to the microsecond
  append_number(out, std::round(s.duration_seconds * 1e6) / 1000.0);
  append_string(out, "upstream", s.upstream_server);
  append_field(out, "local");
  out += s.local ? "true" : "false";
  static const DecisionRecord kNone;
  const DecisionRecord& d = s.decision ? *s.decision : kNone;
  append_field(out, "decision");
  append_json_string(out, d.decision);
  append_string_or_null(out, "consumer", d.consumer);
  append_string_or_null(out, "plan", d.plan);
  append_string_or_null(out, "limit", d.limit);
  append_optional(out, "remaining", d.remaining);
  append_optional(out, "cost", d.cost);
  append_optional(out, "settled_cost", d.settled_cost);
  out += "}\n";
  return out;
}

}  // namespace sluice
