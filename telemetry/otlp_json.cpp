#include "telemetry/otlp_json.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "gateway/session/trace_context.hpp"
#include "middleware/access_log_line.hpp"

namespace sluice {
namespace {

using namespace std::string_view_literals;

// OTLP's SpanKind and StatusCode.
constexpr int kInternal = 1;
constexpr int kServer = 2;
constexpr int kClient = 3;
constexpr int kStatusError = 2;

class SpanWriter {
 public:
  SpanWriter(std::string& out, std::string_view trace_id) : out_(out), trace_id_(trace_id) {}

  void begin(std::string_view span_id, std::string_view parent, std::string_view name, int kind,
             std::int64_t start_ns, std::int64_t end_ns) {
    if (!out_.empty()) out_ += ',';
    out_ += R"({"traceId":")"sv;
    out_ += trace_id_;
    out_ += R"(","spanId":")"sv;
    out_ += span_id;
    if (!parent.empty()) {
      out_ += R"(","parentSpanId":")"sv;
      out_ += parent;
    }
    out_ += R"(","name":)"sv;
    append_json_string(out_, name);
    out_ += R"(,"kind":)"sv;
    out_ += std::to_string(kind);
    out_ += R"(,"startTimeUnixNano":")"sv;
    out_ += std::to_string(start_ns);
    out_ += R"(","endTimeUnixNano":")"sv;
    out_ += std::to_string(std::max(start_ns, end_ns));
    out_ += R"(","attributes":[)"sv;
    first_ = true;
  }
  void text(std::string_view key, std::string_view value) {
    open(key);
    out_ += R"({"stringValue":)"sv;
    append_json_string(out_, value);
    out_ += "}}"sv;
  }
  void number(std::string_view key, std::int64_t value) {
    open(key);
    out_ += R"({"intValue":")"sv;
    out_ += std::to_string(value);
    out_ += "\"}}"sv;
  }
  void real(std::string_view key, double value) {
    if (!std::isfinite(value)) return;  // JSON has no NaN or infinity
    open(key);
    out_ += R"({"doubleValue":)"sv;
    char digits[32];  // the shortest form of a double takes at most 24
    out_.append(digits, fmt::format_to_n(digits, sizeof digits, "{}", value).out);
    out_ += "}}"sv;
  }
  void flag(std::string_view key, bool value) {
    open(key);
    out_ += value ? R"({"boolValue":true}})"sv : R"({"boolValue":false}})"sv;
  }
  // A list of strings, given joined by ','.
  void texts(std::string_view key, std::string_view joined) {
    open(key);
    out_ += R"({"arrayValue":{"values":[)"sv;
    for (std::size_t at = 0; at <= joined.size();) {
      const std::size_t comma = std::min(joined.find(',', at), joined.size());
      if (at > 0) out_ += ',';
      out_ += R"({"stringValue":)"sv;
      append_json_string(out_, joined.substr(at, comma - at));
      out_ += '}';
      at = comma + 1;
    }
    out_ += "]}}}"sv;
  }
  void end(bool error, std::string_view message = {}) {
    out_ += ']';
    if (error) {
      out_ += R"(,"status":{"code":2)"sv;
      if (!message.empty()) {
        out_ += R"(,"message":)"sv;
        append_json_string(out_, message);
      }
      out_ += '}';
    }
    out_ += '}';
    ++count_;
  }
  std::size_t count() const { return count_; }

 private:
  void open(std::string_view key) {
    if (!first_) out_ += ',';
    first_ = false;
    out_ += R"({"key":")"sv;
    out_ += key;  // keys are this file's literals
    out_ += R"(","value":)"sv;
  }

  std::string& out_;
  std::string_view trace_id_;
  bool first_ = true;
  std::size_t count_ = 0;
};

// What a client sent is cut to a bound before it goes into a span, so that
// a span stays small whatever the request (the queue counts spans).
constexpr std::size_t kMaxPathBytes = 1024;
constexpr std::size_t kMaxMethodBytes = 32;

std::string_view bounded(std::string_view text, std::size_t most) {
  return text.substr(0, std::min(text.size(), most));
}

std::string_view protocol_version(std::string_view protocol) {
  if (protocol.starts_with("HTTP/")) return protocol.substr(5);
  return protocol;
}

void server_span(SpanWriter& w, const ExchangeSummary& s, const SpanClock& clock) {
  const TraceFacts& t = *s.trace;
  const std::string_view method = bounded(s.method, kMaxMethodBytes);
  std::string name(method);
  if (!s.route.empty()) name.append(" ").append(s.route);
  w.begin(t.span_id, t.parent_span_id, name, kServer, clock.unix_ns(t.started),
          clock.unix_ns(t.ended));
  w.text("http.request.method", method);
  if (!s.route.empty()) w.text("http.route", s.route);
  w.text("url.path", bounded(s.target.substr(0, s.target.find('?')), kMaxPathBytes));
  if (!t.scheme.empty()) w.text("url.scheme", t.scheme);
  w.text("network.protocol.name", "http");
  w.text("network.protocol.version", protocol_version(s.protocol));
  w.text("client.address", s.client_ip.to_string());
  if (s.status) w.number("http.response.status_code", s.status);
  w.text("sluice.request_id", s.request_id);
  if (s.local) w.flag("sluice.local_reply", true);
  if (!s.upstream_server.empty()) w.text("sluice.upstream.server", s.upstream_server);
  const bool error = s.status >= 500 || s.status == 0;
  if (error) w.text("error.type", s.status ? std::to_string(s.status) : "no_response");
  w.end(error);
}

void decision_span(SpanWriter& w, const ExchangeSummary& s, std::string_view span_id,
                   const SpanClock& clock) {
  const DecisionRecord& d = *s.decision;
  w.begin(span_id, s.trace->span_id, "ratelimit", kInternal, clock.unix_ns(d.asked),
          clock.unix_ns(d.answered));
  if (!d.limits.empty()) w.texts("sluice.ratelimit.limits", d.limits);
  w.text("sluice.ratelimit.decision", d.decision);
  w.text("sluice.ratelimit.answered_by", d.answered_by);
  w.flag("sluice.ratelimit.local", d.answered_by != "redis");
  if (d.answered_by == "redis") {
    const double ms = std::chrono::duration<double, std::milli>(d.answered - d.asked).count();
    w.real("sluice.ratelimit.redis_ms", ms);
  }
  if (!d.plan.empty()) w.text("sluice.ratelimit.plan", d.plan);
  if (!d.limit.empty()) w.text("sluice.ratelimit.limit", d.limit);
  if (d.cost) w.real("sluice.ratelimit.cost", *d.cost);
  if (d.remaining) w.real("sluice.ratelimit.remaining", *d.remaining);
  const bool failed = d.decision == "fail_open" || d.decision == "fail_closed";
  w.end(failed, failed ? "the limiter's store did not answer" : "");
}

void attempt_span(SpanWriter& w, const ExchangeSummary& s, std::size_t i,
                  std::string_view span_id, const SpanClock& clock) {
  const TraceFacts& t = *s.trace;
  const AttemptTrace& a = t.attempts[i];
  w.begin(span_id, t.span_id, std::string("upstream ").append(t.upstream), kClient,
          clock.unix_ns(a.started), clock.unix_ns(a.ended));
  const std::size_t colon = a.server.rfind(':');
  w.text("server.address", a.server.substr(0, colon));
  if (colon != std::string::npos) {
    w.number("server.port", std::atoi(a.server.c_str() + colon + 1));
  }
  w.text("http.request.method", bounded(s.method, kMaxMethodBytes));
  w.text("network.protocol.name", "http");
  w.text("network.protocol.version", a.protocol == "http1" ? "1.1" : "2");
  w.text("sluice.upstream", t.upstream);
  w.text("sluice.upstream.protocol", a.protocol);
  if (i > 0) w.number("http.request.resend_count", static_cast<std::int64_t>(i));
  if (a.status) w.number("http.response.status_code", a.status);
  const std::string_view outcome = a.outcome.empty() ? "unfinished"sv : a.outcome;
  w.text("sluice.upstream.outcome", outcome);
  // Unfinished: the exchange ended first (the client left), no fault of the server.
  const bool error = (outcome != "ok" && outcome != "unfinished") || a.status >= 400;
  if (error) {
    w.text("error.type", outcome != "ok" ? std::string(outcome) : std::to_string(a.status));
  }
  w.end(error);
}

}  // namespace

std::size_t append_exchange_spans(std::string& out, const ExchangeSummary& summary,
                                  const SpanClock& clock) {
  if (!summary.trace) return 0;
  SpanWriter w(out, summary.trace_id);
  server_span(w, summary, clock);
  std::string child;
  const DecisionRecord* d = summary.decision;
  if (d && d->asked != std::chrono::steady_clock::time_point{}) {
    new_span_id(child);
    decision_span(w, summary, child, clock);
  }
  for (std::size_t i = 0; i < summary.trace->attempts.size(); ++i) {
    new_span_id(child);
    attempt_span(w, summary, i, child, clock);
  }
  return w.count();
}

std::string otlp_export_request(std::span<const std::pair<std::string, std::string>> resource,
                                std::string_view version, std::span<const std::string> spans) {
  std::string out = R"({"resourceSpans":[{"resource":{"attributes":[)";
  bool first = true;
  for (const auto& [key, value] : resource) {
    if (!first) out += ',';
    first = false;
    out += R"({"key":)"sv;
    append_json_string(out, key);
    out += R"(,"value":{"stringValue":)"sv;
    append_json_string(out, value);
    out += "}}"sv;
  }
  out += R"(]},"scopeSpans":[{"scope":{"name":"sluice","version":)"sv;
  append_json_string(out, version);
  out += R"(},"spans":[)"sv;
  first = true;
  for (const auto& piece : spans) {
    if (piece.empty()) continue;
    if (!first) out += ',';
    first = false;
    out += piece;
  }
  out += "]}]}]}"sv;
  return out;
}

}  // namespace sluice
