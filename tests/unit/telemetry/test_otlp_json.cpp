// The OTLP JSON of a recorded exchange's spans, parsed back: the tree, the
// times, the attributes and the export request's envelope; and the ratio
// sampler.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "gateway/session/trace_context.hpp"
#include "telemetry/otlp_json.hpp"

namespace sluice {
namespace {

using Steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Recorded {
  DecisionRecord decision;
  TraceFacts trace;
  ExchangeSummary summary;
  Steady::time_point t0 = Steady::now();

  Recorded() {
    trace.span_id = "00000000000000aa";
    trace.parent_span_id = "00000000000000bb";
    trace.scheme = "https";
    trace.upstream = "models";
    trace.started = t0;
    trace.ended = t0 + 10ms;
    decision.decision = "allowed";
    decision.answered_by = "redis";
    decision.limits = "per_key,\"quoted\"";
    decision.asked = t0 + 1ms;
    decision.answered = t0 + 2ms;
    decision.cost = 3;
    AttemptTrace& failed = trace.attempts.emplace_back();
    failed.server = "10.0.0.1:8080";
    failed.protocol = "h2c";
    failed.started = t0 + 2ms;
    failed.ended = t0 + 4ms;
    failed.outcome = "connect_error";
    AttemptTrace& ok = trace.attempts.emplace_back();
    ok.server = "10.0.0.2:8080";
    ok.protocol = "h2c";
    ok.started = t0 + 4ms;
    ok.ended = t0 + 10ms;
    ok.outcome = "ok";
    ok.status = 200;
    summary.route = "chat";
    summary.method = "POST";
    summary.protocol = "HTTP/2";
    summary.target = "/v1/chat?api_key=secret";
    summary.status = 200;
    summary.request_id = "r1";
    summary.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    summary.decision = &decision;
    summary.trace = &trace;
  }
};

std::map<std::string, nlohmann::json> attributes(const nlohmann::json& span) {
  std::map<std::string, nlohmann::json> out;
  for (const auto& a : span["attributes"]) out[a["key"]] = a["value"];
  return out;
}

}  // namespace

TEST_CASE("a recorded exchange's spans form one tree with its attributes", "[telemetry]") {
  Recorded r;
  std::string text;
  const SpanClock clock(std::chrono::system_clock::time_point(std::chrono::seconds(1000)),
                        r.t0 + 10ms);
  REQUIRE(append_exchange_spans(text, r.summary, clock) == 4);
  const auto spans = nlohmann::json::parse("[" + text + "]");
  REQUIRE(spans.size() == 4);
  const auto& server = spans[0];
  CHECK(server["name"] == "POST chat");
  CHECK(server["kind"] == 2);
  CHECK(server["spanId"] == "00000000000000aa");
  CHECK(server["parentSpanId"] == "00000000000000bb");
  CHECK(server["startTimeUnixNano"] == "999990000000");
  CHECK(server["endTimeUnixNano"] == "1000000000000");
  CHECK_FALSE(server.contains("status"));
  auto a = attributes(server);
  CHECK(a["url.path"]["stringValue"] == "/v1/chat");
  CHECK(a["url.scheme"]["stringValue"] == "https");
  CHECK(a["network.protocol.version"]["stringValue"] == "2");
  CHECK(a["http.response.status_code"]["intValue"] == "200");
  const auto& decision = spans[1];
  CHECK(decision["name"] == "ratelimit");
  CHECK(decision["kind"] == 1);
  CHECK(decision["parentSpanId"] == "00000000000000aa");
  CHECK(decision["startTimeUnixNano"] == "999991000000");
  a = attributes(decision);
  CHECK(a["sluice.ratelimit.limits"]["arrayValue"]["values"] ==
        nlohmann::json::parse(R"([{"stringValue":"per_key"},{"stringValue":"\"quoted\""}])"));
  CHECK(a["sluice.ratelimit.local"]["boolValue"] == false);
  CHECK(a["sluice.ratelimit.redis_ms"]["doubleValue"].get<double>() == Approx(1.0));
  const auto& first = spans[2];
  const auto& second = spans[3];
  CHECK(first["kind"] == 3);
  CHECK(first["name"] == "upstream models");
  CHECK(first["status"]["code"] == 2);
  a = attributes(first);
  CHECK(a["server.address"]["stringValue"] == "10.0.0.1");
  CHECK(a["server.port"]["intValue"] == "8080");
  CHECK(a["error.type"]["stringValue"] == "connect_error");
  CHECK_FALSE(a.contains("http.request.resend_count"));
  a = attributes(second);
  CHECK(a["http.request.resend_count"]["intValue"] == "1");
  CHECK(a["network.protocol.version"]["stringValue"] == "2");
  CHECK_FALSE(second.contains("status"));
  std::set<std::string> ids;
  for (const auto& span : spans) ids.insert(span["spanId"].get<std::string>());
  CHECK(ids.size() == 4);
}

TEST_CASE("a request the limiter never saw has no ratelimit span", "[telemetry]") {
  Recorded r;
  r.decision.asked = {};
  r.trace.attempts.clear();
  r.trace.parent_span_id = {};
  r.summary.status = 502;
  std::string text = "x";  // a piece already there: a comma comes first
  REQUIRE(append_exchange_spans(text, r.summary, SpanClock::now()) == 1);
  const auto server = nlohmann::json::parse(text.substr(2));
  CHECK_FALSE(server.contains("parentSpanId"));
  CHECK(server["status"]["code"] == 2);
  r.summary.trace = nullptr;
  CHECK(append_exchange_spans(text, r.summary, SpanClock::now()) == 0);
}

TEST_CASE("an export request wraps the batch in one resource and scope", "[telemetry]") {
  const std::vector<std::pair<std::string, std::string>> resource = {
      {"service.name", "edge \"one\""}, {"host", "a"}};
  const std::vector<std::string> pieces = {R"({"spanId":"1"})", "", R"({"spanId":"2"})"};
  const auto doc = nlohmann::json::parse(otlp_export_request(resource, "1.2.3", pieces));
  const auto& rs = doc["resourceSpans"][0];
  CHECK(rs["resource"]["attributes"][0]["value"]["stringValue"] == "edge \"one\"");
  CHECK(rs["scopeSpans"][0]["scope"]["name"] == "sluice");
  CHECK(rs["scopeSpans"][0]["scope"]["version"] == "1.2.3");
  CHECK(rs["scopeSpans"][0]["spans"].size() == 2);
}

TEST_CASE("the ratio sampler reads the trace id's low 64 bits", "[telemetry]") {
  CHECK(ratio_sampled("ffffffffffffffffffffffffffffffff", 1.0));
  CHECK_FALSE(ratio_sampled("00000000000000000000000000000001", 0.0));
  CHECK(ratio_sampled("ffffffffffffffff0000000000000001", 0.5));
  CHECK_FALSE(ratio_sampled("00000000000000008000000000000000", 0.5));
  CHECK(ratio_sampled("00000000000000007fffffffffffffff", 0.5));
  // About the ratio of random ids.
  std::string traceparent;
  int sampled = 0;
  constexpr int kIds = 20000;
  for (int i = 0; i < kIds; ++i) {
    new_traceparent(traceparent, false);
    sampled += ratio_sampled(std::string_view(traceparent).substr(3, 32), 0.1) ? 1 : 0;
  }
  CHECK(sampled > kIds * 0.085);
  CHECK(sampled < kIds * 0.115);
  std::string id;
  new_span_id(id);
  CHECK(id.size() == 16);
  CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);
}

}  // namespace sluice
