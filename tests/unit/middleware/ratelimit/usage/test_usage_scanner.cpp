// The usage expression and the incremental JSON and SSE scanners that read a
// response's token usage as it passes (middleware/ratelimit/usage/): every
// split of the input gives the same answer, bad values are invalid, and
// nothing grows with the input.
#include <catch2/catch.hpp>

#include <string>

#include "middleware/ratelimit/usage/json_usage_scanner.hpp"
#include "middleware/ratelimit/usage/sse_usage_scanner.hpp"
#include "gateway/config/usage_expression.hpp"

namespace sluice::usage {
namespace {

UsageExpression expr(std::string_view text) {
  std::string error;
  auto e = parse_usage_expression(text, error);
  INFO(error);
  REQUIRE(e);
  return *e;
}

std::optional<double> json_total(const UsageExpression& e, std::string_view doc,
                                 std::size_t max_bytes = 1 << 20) {
  JsonUsageScanner scanner(e, max_bytes);
  scanner.feed(doc);
  return usage_total(e, scanner.found());
}

// The same document fed split at every byte, and a byte at a time.
void check_every_split(const UsageExpression& e, const std::string& doc,
                       std::optional<double> expected) {
  for (std::size_t cut = 0; cut <= doc.size(); ++cut) {
    JsonUsageScanner scanner(e, 1 << 20);
    scanner.feed(std::string_view(doc).substr(0, cut));
    scanner.feed(std::string_view(doc).substr(cut));
    INFO("cut at " << cut);
    CHECK(usage_total(e, scanner.found()) == expected);
  }
  JsonUsageScanner bytes(e, 1 << 20);
  for (const char c : doc) bytes.feed(std::string_view(&c, 1));
  CHECK(usage_total(e, bytes.found()) == expected);
}

std::optional<double> sse_total(const UsageExpression& e, const std::string& stream,
                                std::size_t max_event_bytes = 1 << 16) {
  SseUsageScanner scanner(e, max_event_bytes);
  scanner.feed(stream);
  scanner.finish();
  return usage_total(e, scanner.found());
}

// A stream fed in two pieces, cut at every byte: the same usage and events.
void check_every_sse_split(const UsageExpression& e, const std::string& stream, double expected,
                           std::size_t events) {
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    SseUsageScanner scanner(e, 1 << 16);
    scanner.feed(std::string_view(stream).substr(0, cut));
    scanner.feed(std::string_view(stream).substr(cut));
    scanner.finish();
    INFO("cut at " << cut);
    CHECK(usage_total(e, scanner.found()) == expected);
    CHECK(scanner.events() == events);
  }
}

}  // namespace

TEST_CASE("usage expression: paths, sums and weights", "[usage]") {
  const auto one = expr("usage.total_tokens");
  REQUIRE(one.terms.size() == 1);
  CHECK(one.terms[0].path == std::vector<std::string>{"usage", "total_tokens"});
  const auto sum = expr(" usage.input_tokens + 4 * usage.output_tokens ");
  REQUIRE(sum.terms.size() == 2);
  CHECK(sum.terms[1].weight == 4);
  CHECK(sum.max_path_length() == 2);
  std::string error;
  for (const char* bad : {"", "usage.", ".x", "usage..x", "a b", "0 * x", "-1 * x", "x * y",
                          "a.b.c.d.e.f.g.h.i", "usage.total tokens"}) {
    INFO(bad);
    CHECK_FALSE(parse_usage_expression(bad, error));
    CHECK_FALSE(error.empty());
  }
}

TEST_CASE("usage scanner: an OpenAI and an Anthropic body, split anywhere", "[usage]") {
  const std::string openai =
      R"({"id":"chatcmpl-1","choices":[{"index":0,"message":{"role":"assistant",)"
      R"("content":"usage: {\"total_tokens\": 9}"}}],)"
      R"("usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}})";
  check_every_split(expr("usage.total_tokens"), openai, 42.0);
  check_every_split(expr("usage.prompt_tokens + 2 * usage.completion_tokens"), openai, 72.0);
  const std::string anthropic =
      "{\n  \"type\": \"message\",\n  \"content\": [ {\"type\": \"text\", \"text\": \"hi\"} ],\n"
      "  \"usage\": { \"input_tokens\": 25 , \"output_tokens\": 1.5e1 }\n}";
  check_every_split(expr("usage.input_tokens + usage.output_tokens"), anthropic, 40.0);
}

TEST_CASE("usage scanner: only the path from the root counts", "[usage]") {
  const auto e = expr("usage.total_tokens");
  CHECK(json_total(e, R"({"choices":[{"usage":{"total_tokens":999}}],"usage":{"total_tokens":5}})")
        == 5.0);
  CHECK(json_total(e, R"({"data":{"usage":{"total_tokens":7}}})") == std::nullopt);
  CHECK(json_total(e, R"([{"usage":{"total_tokens":7}}])") == std::nullopt);
  // A name written with escapes is never a path's (the paths are plain ASCII).
  CHECK(json_total(e, R"({"usa\u0067e":{"total_tokens":3}})") == std::nullopt);
  // Twice: the last one wins.
  CHECK(json_total(e, R"({"usage":{"total_tokens":1,"total_tokens":7}})") == 7.0);
  CHECK(json_total(e, R"({"usage":{"total_tokens":1},"usage":{"total_tokens":8}})") == 8.0);
  CHECK(json_total(e, R"({"usage":{"total_tokens":5},"usage":null})") == std::nullopt);
  CHECK(json_total(e, R"({"usage":{"total_tokens":5},"usage":{"other":1}})") == std::nullopt);
}

TEST_CASE("usage scanner: a value that is no usage is invalid", "[usage]") {
  const auto e = expr("usage.total_tokens");
  const std::vector<std::string> values = {"-1",   "1e309", "\"12\"", "null", "true",
                                           "{}",   "[3]",   "+5",       std::string(400, '9')};
  for (const std::string& value : values) {
    INFO(value);
    JsonUsageScanner scanner(e, 1 << 20);
    scanner.feed(R"({"usage":{"total_tokens":)" + value + "}}");
    CHECK(scanner.found()[0].state == TermState::kInvalid);
    CHECK(usage_total(e, scanner.found()) == std::nullopt);
  }
  // A later valid value replaces an invalid one.
  CHECK(json_total(e, R"({"usage":{"total_tokens":null,"total_tokens":4}})") == 4.0);
  CHECK(json_total(e, R"({"usage":{"total_tokens":0}})") == 0.0);
}

TEST_CASE("usage scanner: bounded whatever the document", "[usage]") {
  const auto e = expr("usage.total_tokens");
  // 100,000 levels deep in a value no path goes through: skipped by a
  // counter, nothing kept; what was found stays.
  std::string deep = R"({"usage":{"total_tokens":6},"x":)" + std::string(100000, '[');
  JsonUsageScanner scanner(e, 1 << 20);
  scanner.feed(deep);
  CHECK_FALSE(scanner.complete());
  CHECK(usage_total(e, scanner.found()) == 6.0);
  // A root that nests past kMaxDepth on the way to no path: the same.
  JsonUsageScanner arrays(e, 1 << 20);
  arrays.feed(std::string(100000, '[') + R"({"usage":{"total_tokens":6}})");
  CHECK(usage_total(e, arrays.found()) == std::nullopt);  // inside arrays: never a path
  // The usage past max_bytes is not found.
  const std::string padded = R"({"pad":")" + std::string(5000, 'p') + R"(","usage":{"total_tokens":3}})";
  JsonUsageScanner cut(e, 1000);
  cut.feed(padded);
  CHECK(cut.truncated());
  CHECK(usage_total(e, cut.found()) == std::nullopt);
  CHECK(json_total(e, padded) == 3.0);
  // Malformed: stops, nothing invented.
  CHECK(json_total(e, R"({"usage":{"total_tokens" 3}})") == std::nullopt);
  CHECK(json_total(e, "not json at all") == std::nullopt);
}

TEST_CASE("usage scanner: an OpenAI stream with include_usage", "[usage]") {
  const auto e = expr("usage.total_tokens");
  std::string stream;
  for (int i = 0; i < 5; ++i) {
    stream += R"(data: {"choices":[{"delta":{"content":"tok"}}],"usage":null})" "\n\n";
  }
  stream += R"(data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}})"
            "\n\n";
  stream += "data: [DONE]\n\n";
  // Only the last event names usage with a value: the one event read.
  check_every_sse_split(e, stream, 8.0, 1);
  // Without include_usage: every chunk's usage is null, none valid.
  std::string without;
  for (int i = 0; i < 3; ++i) without += R"(data: {"choices":[],"usage":null})" "\n\n";
  CHECK(sse_total(e, without + "data: [DONE]\n\n") == std::nullopt);
}

TEST_CASE("usage scanner: an Anthropic event stream, CRLF lines", "[usage]") {
  const auto e = expr("message.usage.input_tokens + usage.output_tokens");
  const std::string stream =
      "event: message_start\r\n"
      R"(data: {"type":"message_start","message":{"id":"m","usage":{"input_tokens":25,"output_tokens":1}}})"
      "\r\n\r\n"
      "event: ping\r\ndata: {\"type\": \"ping\"}\r\n\r\n"
      "event: content_block_delta\r\n"
      R"(data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"Hi"}})"
      "\r\n\r\n"
      "event: message_delta\r\n"
      R"(data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}})"
      "\r\n\r\n"
      "event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n";
  check_every_sse_split(e, stream, 40.0, 5);
  // The last message_delta's count is the one that counts.
  const std::string two_deltas =
      stream.substr(0, stream.find("event: message_stop")) +
      "event: message_delta\r\ndata: {\"usage\":{\"output_tokens\":19}}\r\n\r\n";
  CHECK(sse_total(e, two_deltas) == 44.0);
}

TEST_CASE("usage scanner: event data over several lines, comments, a last event unended",
          "[usage]") {
  const auto e = expr("usage.total_tokens");
  CHECK(sse_total(e, ": a comment\nid: 1\ndata: {\"usage\":\ndata: {\"total_tokens\":4}}\n\n") ==
        4.0);
  CHECK(sse_total(e, "data:{\"usage\":{\"total_tokens\":2}}") == 2.0);  // no space, no end
}

TEST_CASE("usage scanner: an event past its bound, and one that never ends", "[usage]") {
  const auto e = expr("usage.total_tokens");
  const std::string big = "data: {\"pad\":\"" + std::string(100000, 'x') +
                          "\",\"usage\":{\"total_tokens\":9}}\n\n";
  SseUsageScanner scanner(e, 4096);
  scanner.feed(big);
  scanner.feed("data: {\"usage\":{\"total_tokens\":3}}\n\n");
  scanner.finish();
  CHECK(scanner.truncated_events() == 1);
  CHECK(usage_total(e, scanner.found()) == 3.0);  // the next event is read again
  // 10 MB with no newline ever: fed in pieces, nothing kept but the state.
  SseUsageScanner endless(e, 4096);
  const std::string piece(64 * 1024, 'y');
  endless.feed("data: \"");
  for (int i = 0; i < 160; ++i) endless.feed(piece);
  endless.finish();
  CHECK(endless.truncated_events() == 1);
  CHECK(usage_total(e, endless.found()) == std::nullopt);
}

}  // namespace sluice::usage

namespace sluice::usage {

TEST_CASE("usage scanner: events passed over are only those that cannot hold a usage",
          "[usage]") {
  const auto e = expr("message.usage.input_tokens + usage.output_tokens");
  // Anthropic's events with LF line ends, cut at every byte: the events read
  // are message_start and message_delta (the others name neither member).
  const std::string stream =
      "event: message_start\n"
      R"(data: {"type":"message_start","message":{"id":"m","usage":{"input_tokens":25,"output_tokens":1}}})"
      "\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\n"
      "event: content_block_delta\n"
      R"(data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"say \"usage\": 99"}})"
      "\n\nevent: message_delta\n"
      R"(data: {"type":"message_delta","usage" : {"output_tokens":15}})"
      "\n\nevent: message_stop\ndata: {\"type\":\"usage\"}\n\n";
  check_every_sse_split(e, stream, 40.0, 2);
  // A usage named on the event's second data line: the whole event is read.
  const auto t = expr("usage.total_tokens");
  CHECK(sse_total(t, "data: {\"a\":1,\ndata: \"usage\":{\"total_tokens\":4}}\n\n") == 4.0);
  // An event the stream's end ends, carried over pieces.
  SseUsageScanner tail(t, 4096);
  tail.feed("data: {\"usage\":{\"tot");
  tail.feed("al_tokens\":7}}");
  tail.finish();
  CHECK(usage_total(t, tail.found()) == 7.0);
  // An unended cold event longer than the bound: skipped to its end, counted.
  SseUsageScanner big(t, 4096);
  big.feed("data: {\"pad\":\"" + std::string(10000, 'x'));
  big.feed(std::string(10000, 'x') + "\"}\n");
  big.feed("\ndata: {\"usage\":{\"total_tokens\":5}}\n\n");
  big.finish();
  CHECK(big.truncated_events() == 1);
  CHECK(usage_total(t, big.found()) == 5.0);
}

}  // namespace sluice::usage
