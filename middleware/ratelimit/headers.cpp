#include "middleware/ratelimit/headers.hpp"

#include <algorithm>
#include <cmath>

#include "common/decimal.hpp"
#include "common/hex.hpp"
#include "common/text_writer.hpp"
#include "middleware/ratelimit/algorithms/algorithm.hpp"

namespace sluice {

using namespace std::string_view_literals;

namespace {

constexpr double kTolerance = 1e-9;

std::int64_t clamp_to_int(double value, double max) {
  if (!(value > 0)) return 0;  // also NaN
  if (value >= max) return static_cast<std::int64_t>(max);
  return static_cast<std::int64_t>(value);
}

// Appends `text` in double quotes, '"' and '\\' escaped by a backslash and
// every other byte written by `other(out, byte)`.
template <class Other>
void append_quoted(std::string& out, std::string_view text, Other other) {
  out += '"';
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else {
      other(out, static_cast<unsigned char>(c));
    }
  }
  out += '"';
}

// A JSON string: control characters as \u00XX, everything else as it is.
void append_json_string(std::string& out, std::string_view text) {
  append_quoted(out, text, [](std::string& o, unsigned char byte) {
    if (byte < 0x20) {
      o += "\\u00";
      hex::append_byte(o, byte);
    } else {
      o += static_cast<char>(byte);
    }
  });
}

// The most bytes put_sf_string writes for `text`.
std::size_t sf_string_bound(std::string_view text) { return 2 * text.size() + 2; }

// A structured-field string: quoted, '"' and '\\' escaped, bytes outside
// printable ASCII as '?'.
void put_sf_string(TextWriter& out, std::string_view text) {
  out.put('"');
  // A limit's name is nearly always plain: then one copy, not a byte at a time.
  if (std::all_of(text.begin(), text.end(), [](char c) {
        return c >= 0x20 && c <= 0x7e && c != '"' && c != '\\';
      })) {
    out.put(text);
  } else {
    for (const char c : text) {
      const auto byte = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') out.put('\\');
      out.put(byte < 0x20 || byte > 0x7e ? '?' : c);
    }
  }
  out.put('"');
}

// The header values below are never negative (clamp_to_int).
void put_int(TextWriter& out, std::int64_t value) {
  out.decimal(static_cast<std::uint64_t>(value));
}

void put_int_field(HeaderList& out, std::string_view name, std::int64_t value) {
  TextWriter value_text(out.add(name), TextWriter::kDecimalBound);
  put_int(value_text, value);
}

// The bytes of one RateLimit-Policy or RateLimit item beside its name:
// ", " before it, ";q=" or ";r=", ";w=" or ";t=" and two numbers.
constexpr std::size_t kItemExtraBound = 2 + 2 * (3 + TextWriter::kDecimalBound);

// w: the algorithm's window (a token bucket's C/R, the time in which the
// whole capacity refills; a sliding window's own length), in whole seconds.
std::int64_t window_seconds(const LimitDescriptor& limit) {
  return ceil_seconds(algorithm_row(limit).policy_window_seconds(limit));
}

}  // namespace

std::int64_t ceil_seconds(double seconds) {
  return clamp_to_int(std::ceil(seconds - kTolerance), static_cast<double>(kMaxHeaderSeconds));
}

std::int64_t floor_tokens(double tokens) {
  return clamp_to_int(std::floor(tokens + kTolerance), 9.0e15);
}

std::string sf_string(std::string_view text) {
  std::string out;
  {
    TextWriter writer(out, sf_string_bound(text));
    put_sf_string(writer, text);
  }  // cut to what was written before it is returned
  return out;
}

namespace {

// The competing limit with the smallest share of its capacity left.
template <class Competes>
std::size_t least_left(std::span<const LimitDescriptor> limits, const RateDecision& decision,
                       const Competes& competes) {
  const std::size_t n = std::min(limits.size(), decision.limits.size());
  std::size_t best = limits.size();
  double best_ratio = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!competes(i)) continue;
    const double capacity = limits[i].capacity;
    const double ratio = capacity > 0 ? decision.limits[i].remaining / capacity : 0;
    if (best == limits.size() || ratio < best_ratio) {
      best = i;
      best_ratio = ratio;
    }
  }
  return best;
}

}  // namespace

std::size_t most_restrictive_limit(std::span<const LimitDescriptor> limits,
                                   const RateDecision& decision) {
  const std::size_t n = std::min(limits.size(), decision.limits.size());
  // On a denial, only insufficient buckets compete (if the decision names any).
  const bool violated_only =
      !decision.allowed && std::any_of(decision.limits.begin(), decision.limits.begin() + n,
                                       [](const LimitState& s) { return !s.sufficient; });
  return least_left(limits, decision, [&](std::size_t i) {
    return !violated_only || !decision.limits[i].sufficient;
  });
}

std::size_t most_restrictive_of(std::span<const LimitDescriptor> limits,
                                const RateDecision& decision,
                                const std::function<bool(std::size_t)>& competes) {
  return least_left(limits, decision, competes);
}

double retry_after_seconds(std::span<const LimitDescriptor> limits, const RateDecision& decision) {
  const std::size_t n = std::min(limits.size(), decision.limits.size());
  double seconds = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!decision.limits[i].sufficient)
      seconds = std::max(seconds, decision.limits[i].seconds_to_cost);
  }
  return seconds;
}

HeaderList rate_limit_headers(std::span<const LimitDescriptor> limits, double cost,
                              const RateDecision& decision) {
  HeaderList headers;
  append_rate_limit_headers(headers, limits, cost, decision);
  return headers;
}

void append_rate_limit_headers(HeaderList& out, std::span<const LimitDescriptor> limits,
                               [[maybe_unused]] double cost, const RateDecision& decision) {
  const std::size_t n = std::min(limits.size(), decision.limits.size());
  const bool all_shown = std::all_of(limits.begin(), limits.begin() + n, [](const auto& l) {
    return l.show_legacy && l.show_ietf;
  });
  // X-RateLimit-* for the most restrictive limit the client may see; on a
  // denial, a shown limit that is short competes first.
  std::size_t chosen = n;
  bool hidden_denial = false;  // refused for hidden limits alone: Retry-After only
  if (all_shown) {
    chosen = most_restrictive_limit(limits.first(n), decision);
  } else {
    bool legacy_short = false;
    bool shown_short = false;
    for (std::size_t i = 0; i < n; ++i) {
      const bool is_short = !decision.limits[i].sufficient;
      legacy_short = legacy_short || (limits[i].show_legacy && is_short);
      shown_short = shown_short || ((limits[i].show_legacy || limits[i].show_ietf) && is_short);
    }
    legacy_short = legacy_short && !decision.allowed;
    hidden_denial = !decision.allowed && !shown_short;
    if (!hidden_denial) {
      chosen = least_left(limits.first(n), decision, [&](std::size_t i) {
        return limits[i].show_legacy && (!legacy_short || !decision.limits[i].sufficient);
      });
    }
  }
  if (chosen < n) {
    const LimitState& state = decision.limits[chosen];
    put_int_field(out, "X-RateLimit-Limit", floor_tokens(limits[chosen].capacity));
    put_int_field(out, "X-RateLimit-Remaining", floor_tokens(state.remaining));
    put_int_field(out, "X-RateLimit-Reset", ceil_seconds(state.seconds_to_full));
  }

  // RateLimit-Policy and RateLimit: one list item per shown limit, in route order.
  std::size_t bound = 0;
  std::size_t ietf = 0;
  for (std::size_t i = 0; i < n && !hidden_denial; ++i) {
    if (!limits[i].show_ietf) continue;
    bound += sf_string_bound(limits[i].limit) + kItemExtraBound;
    ++ietf;
  }
  if (ietf > 0) {
    {
      TextWriter policy(out.add("RateLimit-Policy"), bound);
      bool first = true;
      for (std::size_t i = 0; i < n; ++i) {
        if (!limits[i].show_ietf) continue;
        if (!first) policy.put(", "sv);
        first = false;
        put_sf_string(policy, limits[i].limit);
        policy.put(";q="sv);
        put_int(policy, floor_tokens(limits[i].capacity));
        policy.put(";w="sv);
        put_int(policy, window_seconds(limits[i]));
      }
    }
    {
      TextWriter current(out.add("RateLimit"), bound);
      bool first = true;
      for (std::size_t i = 0; i < n; ++i) {
        if (!limits[i].show_ietf) continue;
        if (!first) current.put(", "sv);
        first = false;
        put_sf_string(current, limits[i].limit);
        current.put(";r="sv);
        put_int(current, floor_tokens(decision.limits[i].remaining));
        current.put(";t="sv);
        put_int(current, ceil_seconds(decision.limits[i].seconds_to_cost));
      }
    }  // each writer ends before the next add(), which may move the strings
  }

  // Retry-After whatever is shown: a client told 429 is told when to come back.
  if (!decision.allowed) {
    const std::int64_t retry_after =
        std::max<std::int64_t>(1, ceil_seconds(retry_after_seconds(limits.first(n), decision)));
    put_int_field(out, "Retry-After", retry_after);
    out.emplace_back("Cache-Control", "no-store");
  }
}

std::string too_many_requests_body(std::span<const LimitDescriptor> limits,
                                   const RateDecision& decision, unsigned status) {
  const std::size_t n = std::min(limits.size(), decision.limits.size());
  constexpr std::string_view kStart =
      R"({"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",)"
      R"("title":"Too Many Requests","status":)";
  // Sized once: the fixed text, the numbers, and each name escaped at worst.
  std::size_t size = kStart.size() + 96;
  for (std::size_t i = 0; i < n; ++i) size += 6 * limits[i].limit.size() + 3;
  std::string body;
  body.reserve(size);
  body += kStart;
  body += std::to_string(status);
  body += R"(,"violated-policies":[)";
  bool first = true;
  for (std::size_t i = 0; i < n; ++i) {
    if (decision.limits[i].sufficient) continue;
    if (!limits[i].show_legacy && !limits[i].show_ietf) continue;  // hidden: not named
    if (!first) body += ',';
    first = false;
    append_json_string(body, limits[i].limit);
  }
  const double ms = retry_after_seconds(limits.first(n), decision) * 1000.0;
  const std::int64_t retry_after_ms = std::max<std::int64_t>(
      1, clamp_to_int(std::ceil(ms - 1e-6), static_cast<double>(kMaxHeaderSeconds) * 1000.0));
  body += R"(],"retry_after_ms":)";
  body += std::to_string(retry_after_ms);
  body += '}';
  return body;
}

std::string rate_limit_unavailable_body() {
  return R"({"type":"about:blank","title":"Service Unavailable","status":503,)"
         R"("detail":"rate limiter unavailable"})";
}

}  // namespace sluice
