// W3C trace context: which traceparent values are kept, new ones' shape, and
// the trace id added to Sluice's own JSON replies.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "gateway/session/local_reply.hpp"
#include "gateway/session/trace_context.hpp"

using namespace sluice;

namespace trace_context_test {

constexpr const char* kValid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST_CASE("traceparent: a well-formed value is kept, anything else refused", "[trace]") {
  CHECK(traceparent_trace_id(kValid) == std::optional<std::string_view>(
                                            "4bf92f3577b34da6a3ce929d0e0e4736"));
  // A later version may carry more after a '-'.
  CHECK(traceparent_trace_id(
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds"));
  const std::string bad[] = {
      "",
      "garbage",
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // version ff
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // all-zero trace id
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // all-zero parent id
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // upper case
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // v00 with more
      "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",   // short trace id
      "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",  // wrong separators
      "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  // more without '-'
      "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // not hex
      "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + std::string(600, 'a'),
  };
  for (const auto& value : bad) {
    CAPTURE(value);
    CHECK_FALSE(traceparent_trace_id(value));
  }
}

TEST_CASE("traceparent: new ones are valid, distinct, and sampled only when asked", "[trace]") {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string tp = new_traceparent(false);
    REQUIRE(traceparent_trace_id(tp));
    CHECK(tp.substr(53) == "00");
    seen.insert(tp.substr(3, 32));
  }
  CHECK(seen.size() == 1000);
  CHECK(new_traceparent(true).substr(53) == "01");
}

TEST_CASE("local replies: the trace id joins a JSON body", "[trace]") {
  LocalReply reply = make_local_reply(404, "no route", "r1");
  with_trace_id(reply, "4bf92f3577b34da6a3ce929d0e0e4736");
  const auto doc = nlohmann::json::parse(reply.body);
  CHECK(doc["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736");
  CHECK(doc["request_id"] == "r1");

  LocalReply empty_object;
  empty_object.content_type = "application/problem+json";
  empty_object.body = "{}";
  with_trace_id(empty_object, "ab");
  CHECK(empty_object.body == R"({"trace_id":"ab"})");

  LocalReply custom;  // an operator's reject body stays as written
  custom.body = R"({"error":"slow down"})";
  custom.verbatim = true;
  with_trace_id(custom, "ab");
  CHECK(custom.body == R"({"error":"slow down"})");

  LocalReply text;
  text.content_type = "text/plain";
  text.body = "{not json";
  with_trace_id(text, "ab");
  CHECK(text.body == "{not json");
}

}  // namespace trace_context_test
