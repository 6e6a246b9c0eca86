// The usage inspector (middleware/ratelimit/usage/usage_inspector.hpp): a
// response body read for its usage as it is relayed, by its Content-Type and
// Content-Encoding; what each kind of body comes to.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <string>

#include "gateway/config/usage_expression.hpp"
#include "middleware/ratelimit/usage/inflater.hpp"
#include "middleware/ratelimit/usage/usage_inspector.hpp"

namespace sluice::usage {
namespace {

UsageExpression inspector_expr(std::string_view text) {
  std::string error;
  auto e = parse_usage_expression(text, error);
  REQUIRE(e);
  return *e;
}

// `text` compressed: gzip (windowBits 31) or zlib (15).
std::string compressed(const std::string& text, int window_bits) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY) ==
          Z_OK);
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  return out;
}

struct Read {
  std::optional<double> usage;
  BodyUsage outcome;
};

Read inspect(const UsageExpression& e, std::string_view type, std::string_view encoding,
             const std::string& body, std::size_t cut = std::string::npos,
             std::size_t max_bytes = 1 << 20, bool ended = true) {
  UsageInspector inspector(e, max_bytes);
  inspector.response_head(200, type, encoding);
  if (cut == std::string::npos) {
    inspector.response_body(body);
  } else {
    inspector.response_body(std::string_view(body).substr(0, cut));
    inspector.response_body(std::string_view(body).substr(cut));
  }
  if (ended) inspector.response_end();
  return {inspector.usage(), inspector.outcome()};
}

const std::string kOpenAiJson =
    R"({"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":)"
    R"({"role":"assistant","content":"Hello"},"finish_reason":"stop"}],)"
    R"("usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}})";

const std::string kAnthropicStream =
    "event: message_start\n"
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":"
    "{\"input_tokens\":25,\"output_tokens\":1}}}\n\n"
    "event: content_block_delta\n"
    "data: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"Hi\"}}\n\n"
    "event: message_delta\n"
    "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n"
    "event: message_stop\n"
    "data: {\"type\":\"message_stop\"}\n\n";

}  // namespace

TEST_CASE("a JSON body's usage is read by its content type", "[usage]") {
  const auto e = inspector_expr("usage.total_tokens");
  auto r = inspect(e, "application/json", "", kOpenAiJson);
  CHECK(r.usage == 42);
  CHECK(r.outcome == BodyUsage::kFound);
  CHECK(inspect(e, "application/json; charset=utf-8", "", kOpenAiJson).usage == 42);
  CHECK(inspect(e, "Application/Problem+JSON", "identity", kOpenAiJson).usage == 42);
  // Not JSON: never read, whatever it holds.
  r = inspect(e, "text/plain", "", kOpenAiJson);
  CHECK_FALSE(r.usage);
  CHECK(r.outcome == BodyUsage::kUnreadable);
  CHECK(inspect(e, "", "", kOpenAiJson).outcome == BodyUsage::kUnreadable);
  // A body cut short still has what came before the cut.
  CHECK(inspect(e, "application/json", "", kOpenAiJson, std::string::npos, 1 << 20, false).usage ==
        42);
}

TEST_CASE("a JSON body's usage outcomes: missing, invalid, truncated", "[usage]") {
  const auto e = inspector_expr("usage.prompt_tokens + usage.completion_tokens");
  CHECK(inspect(e, "application/json", "", kOpenAiJson).usage == 42);
  auto r = inspect(e, "application/json", "", R"({"usage":{"prompt_tokens":3}})");
  CHECK_FALSE(r.usage);
  CHECK(r.outcome == BodyUsage::kMissing);
  r = inspect(e, "application/json", "",
              R"({"usage":{"prompt_tokens":3,"completion_tokens":"12"}})");
  CHECK(r.outcome == BodyUsage::kInvalid);
  r = inspect(e, "application/json", "", R"({"usage":{"prompt_tokens":-1,"completion_tokens":1}})");
  CHECK(r.outcome == BodyUsage::kInvalid);
  // A usage past max_inspect_bytes is not found.
  const std::string padded =
      R"({"pad":")" + std::string(5000, 'x') + R"(","usage":{"prompt_tokens":1,"completion_tokens":2}})";
  r = inspect(e, "application/json", "", padded, std::string::npos, 4096);
  CHECK_FALSE(r.usage);
  CHECK(r.outcome == BodyUsage::kTruncated);
  CHECK(inspect(e, "application/json", "", padded, std::string::npos, 8192).usage == 3);
  // No response head at all.
  UsageInspector none(e, 1 << 20);
  CHECK(none.outcome() == BodyUsage::kMissing);
  CHECK_FALSE(none.usage());
}

TEST_CASE("a usage beyond 2^53 is not taken", "[usage]") {
  const auto e = inspector_expr("2 * usage.total_tokens");
  const auto r = inspect(e, "application/json", "", R"({"usage":{"total_tokens":9007199254740992}})");
  CHECK_FALSE(r.usage);
  CHECK(r.outcome == BodyUsage::kInvalid);
}

TEST_CASE("an event stream's usage: the last value of each path", "[usage]") {
  const auto e = inspector_expr("message.usage.input_tokens + usage.output_tokens");
  for (std::size_t cut = 0; cut <= kAnthropicStream.size(); ++cut) {
    INFO("cut at " << cut);
    const auto r = inspect(e, "text/event-stream; charset=utf-8", "", kAnthropicStream, cut);
    REQUIRE(r.usage == 40);
  }
  const auto r = inspect(e, "text/event-stream", "", "data: {\"x\":1}\n\n");
  CHECK(r.outcome == BodyUsage::kMissing);
}

TEST_CASE("a gzip or deflate body is decoded on its way, cut anywhere", "[usage]") {
  const auto e = inspector_expr("usage.total_tokens");
  for (const int bits : {31, 15}) {
    const std::string body = compressed(kOpenAiJson, bits);
    const std::string coding = bits == 31 ? "gzip" : "deflate";
    for (std::size_t cut = 0; cut <= body.size(); ++cut) {
      INFO(coding << " cut at " << cut);
      REQUIRE(inspect(e, "application/json", coding, body, cut).usage == 42);
    }
  }
  const auto s = inspector_expr("message.usage.input_tokens + usage.output_tokens");
  CHECK(inspect(s, "text/event-stream", "x-gzip", compressed(kAnthropicStream, 31)).usage == 40);
}

TEST_CASE("an encoding with no decoder, or a corrupt one, is unreadable", "[usage]") {
  const auto e = inspector_expr("usage.total_tokens");
  CHECK(inspect(e, "application/json", "br", kOpenAiJson).outcome == BodyUsage::kUnreadable);
  CHECK(inspect(e, "application/json", "gzip, gzip", kOpenAiJson).outcome ==
        BodyUsage::kUnreadable);
  // Plain text said to be gzip.
  const auto r = inspect(e, "application/json", "gzip", kOpenAiJson);
  CHECK_FALSE(r.usage);
  CHECK(r.outcome == BodyUsage::kUnreadable);
}

TEST_CASE("a decompression bomb is read within the bound and nothing grows", "[usage]") {
  const auto e = inspector_expr("usage.total_tokens");
  // 64 MiB of spaces in a few KiB of gzip: the JSON bound stops the decoding.
  const std::string bomb = compressed("{\"pad\":\"" + std::string(64 << 20, ' ') + "\"}", 31);
  CHECK(bomb.size() < (1 << 20));
  const auto r = inspect(e, "application/json", "gzip", bomb, std::string::npos, 1 << 20);
  CHECK(r.outcome == BodyUsage::kTruncated);
}

TEST_CASE("the inflater decodes gzip and zlib and refuses the rest", "[usage]") {
  CHECK(Inflater::for_encoding("GZIP"));
  CHECK(Inflater::for_encoding(" deflate "));
  CHECK_FALSE(Inflater::for_encoding("br"));
  CHECK_FALSE(Inflater::for_encoding("zstd"));
  Inflater inflater;
  std::string_view in = "definitely not compressed";
  CHECK(inflater.decode(in).empty());
  CHECK(inflater.failed());
}

}  // namespace sluice::usage

namespace sluice::usage {

TEST_CASE("alternatives: the first whose paths are all found is the usage", "[usage]") {
  auto e = inspector_expr("usage.total_tokens");
  REQUIRE(add_alternative(e, inspector_expr("response.usage.total_tokens")));
  REQUIRE(e.ends == std::vector<std::size_t>{1, 2});
  CHECK(inspect(e, "application/json", "", kOpenAiJson).usage == 42);
  const std::string completed =
      "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":"
      "{\"usage\":{\"input_tokens\":5,\"output_tokens\":6,\"total_tokens\":11}}}\n\n";
  CHECK(inspect(e, "text/event-stream", "", completed).usage == 11);
  // Both present: the first alternative wins.
  CHECK(inspect(e, "application/json", "",
                R"({"response":{"usage":{"total_tokens":7}},"usage":{"total_tokens":9}})")
            .usage == 9);
  // Too many paths together.
  auto big = inspector_expr("a.b + a.c + a.d + a.e + a.f");
  CHECK_FALSE(add_alternative(big, inspector_expr("x.a + x.b + x.c + x.d")));
}

}  // namespace sluice::usage

namespace sluice::usage {

TEST_CASE("gzip members one after the other, raw deflate, trailing bytes", "[usage]") {
  const auto e = inspector_expr("usage.total_tokens");
  // Two gzip members: the body is their concatenation.
  const std::string half = kOpenAiJson.substr(0, 40);
  const std::string two = compressed(half, 31) + compressed(kOpenAiJson.substr(40), 31);
  for (std::size_t cut = 0; cut <= two.size(); cut += 7) {
    INFO("cut at " << cut);
    REQUIRE(inspect(e, "application/json", "gzip", two, cut).usage == 42);
  }
  // Deflate without its zlib header (windowBits -15).
  CHECK(inspect(e, "application/json", "deflate", compressed(kOpenAiJson, -15)).usage == 42);
  // Junk after the last member is ignored, as gzip does.
  CHECK(inspect(e, "application/json", "gzip", compressed(kOpenAiJson, 31) + "\n\n").usage == 42);
}

}  // namespace sluice::usage
