#include "middleware/access_log_line.hpp"

#include <charconv>
#include <cmath>
#include <ctime>

#include <fmt/format.h>

#include "common/target_parts.hpp"

namespace sluice {

using namespace std::string_view_literals;

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

// Printable ASCII other than '"' and '\\': written into a JSON string as it is.
bool plain_json_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x20 && u < 0x80 && c != '"' && c != '\\';
}

// `value` in `width` decimal digits, zero-padded (value < 10^width).
void append_digits(std::string& out, unsigned value, int width) {
  char digits[4];
  for (int k = width - 1; k >= 0; --k) {
    digits[k] = static_cast<char>('0' + value % 10);
    value /= 10;
  }
  out.append(digits, static_cast<std::size_t>(width));
}

// "YYYY-MM-DDTHH:MM:SS" of a second since the epoch, kept per thread for the
// second it was last asked for (a busy log writes many lines per second).
std::string_view utc_second(std::int64_t secs) {
  thread_local bool filled = false;
  thread_local std::int64_t cached = 0;
  thread_local std::string text;
  if (!filled || secs != cached) {
    const auto t = static_cast<std::time_t>(secs);
    std::tm tm{};
    gmtime_r(&t, &tm);
    text.clear();
    append_digits(text, static_cast<unsigned>(tm.tm_year + 1900) % 10000, 4);
    text += '-';
    append_digits(text, static_cast<unsigned>(tm.tm_mon + 1), 2);
    text += '-';
    append_digits(text, static_cast<unsigned>(tm.tm_mday), 2);
    text += 'T';
    append_digits(text, static_cast<unsigned>(tm.tm_hour), 2);
    text += ':';
    append_digits(text, static_cast<unsigned>(tm.tm_min), 2);
    text += ':';
    append_digits(text, static_cast<unsigned>(tm.tm_sec), 2);
    cached = secs;
    filled = true;
  }
  return text;
}

// The first moment of the year 10000 (ms since the epoch): a clock at or past
// it, or before the epoch, has its timestamp written the general way.
constexpr std::int64_t kYear10000Ms = 253'402'300'800'000;

void append_timestamp(std::string& out, std::int64_t unix_ms) {
  if (unix_ms >= 0 && unix_ms < kYear10000Ms) {
    out += utc_second(unix_ms / 1000);
    out += '.';
    append_digits(out, static_cast<unsigned>(unix_ms % 1000), 3);
    return;
  }
  const auto secs = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  fmt::format_to(std::back_inserter(out), "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 static_cast<int>(unix_ms % 1000));
}

// A field after the first: `key` is its separator, quoted name and colon
// (key("status") is ,"status":), appended at once.
void append_field(std::string& out, std::string_view key) { out += key; }

void append_string(std::string& out, std::string_view key, std::string_view value) {
  append_field(out, key);
  append_json_string(out, value);
}

void append_string_or_null(std::string& out, std::string_view key, std::string_view value) {
  append_field(out, key);
  if (value.empty()) {
    out += "null"sv;
  } else {
    append_json_string(out, value);
  }
}

void append_number(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null"sv;
    return;
  }
  char digits[32];  // a double's shortest form takes at most 24
  out.append(digits, fmt::format_to_n(digits, sizeof digits, "{}", value).out);
}

void append_optional(std::string& out, std::string_view key, const std::optional<double>& value) {
  append_field(out, key);
  if (value) {
    append_number(out, *value);
  } else {
    out += "null"sv;
  }
}

}  // namespace

void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (std::size_t i = 0; i < text.size();) {
    // A run of printable ASCII that needs no escape, appended at once.
    std::size_t run = i;
    while (run < text.size() && plain_json_byte(text[run])) ++run;
    if (run > i) {
      out.append(text.data() + i, run - i);
      i = run;
      continue;
    }
    const char c = text[i];
    const auto u = static_cast<unsigned char>(c);
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
  append_access_log_line(out, s, unix_ms);
  return out;
}

void append_access_log_line(std::string& out, const ExchangeSummary& s, std::int64_t unix_ms) {
  out += "{\"ts\":\""sv;
  append_timestamp(out, unix_ms);
  out += "Z\""sv;
  // The fields the log has always had are strings, "" when they do not apply;
  // the later ones are null then.
  append_string(out, R"(,"request_id":)"sv, s.request_id);
  append_string_or_null(out, R"(,"trace_id":)"sv, s.trace_id);
  append_field(out, R"(,"client_ip":)"sv);
  append_json_string(out, s.client_ip.to_string());
  append_string(out, R"(,"method":)"sv, s.method);
  append_string_or_null(out, R"(,"protocol":)"sv, s.protocol);
  append_string(out, R"(,"path":)"sv, split_target(s.target).path);
  append_string(out, R"(,"route":)"sv, s.route);
  append_field(out, R"(,"status":)"sv);
  char status[12];
  out.append(status, std::to_chars(status, status + sizeof status, s.status).ptr);
  append_field(out, R"(,"duration_ms":)"sv);  // to the microsecond
  append_number(out, std::round(s.duration_seconds * 1e6) / 1000.0);
  append_string(out, R"(,"upstream":)"sv, s.upstream_server);
  append_field(out, R"(,"attempts":)"sv);
  char attempts[24];
  out.append(attempts, std::to_chars(attempts, attempts + sizeof attempts, s.attempts).ptr);
  append_field(out, R"(,"servers_tried":[)"sv);
  for (std::string_view rest = s.servers_tried; !rest.empty();) {
    const std::size_t comma = rest.find(',');
    if (rest.data() != s.servers_tried.data()) out += ',';
    append_json_string(out, rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  }
  out += ']';
  append_field(out, R"(,"local":)"sv);
  out += s.local ? "true"sv : "false"sv;
  static const DecisionRecord kNone;
  const DecisionRecord& d = s.decision ? *s.decision : kNone;
  append_field(out, R"(,"decision":)"sv);
  append_json_string(out, d.decision);
  append_string_or_null(out, R"(,"consumer":)"sv, d.consumer);
  append_string_or_null(out, R"(,"plan":)"sv, d.plan);
  append_string_or_null(out, R"(,"limit":)"sv, d.limit);
  append_optional(out, R"(,"remaining":)"sv, d.remaining);
  append_optional(out, R"(,"cost":)"sv, d.cost);
  append_optional(out, R"(,"settled_cost":)"sv, d.settled_cost);
  out += "}\n"sv;
}

}  // namespace sluice
