// A seeded mutation fuzzer for request heads and chunked bodies: the request
// parser, configured as the client session configures it (header and body
// limits, bounded read buffer, chunk-extension limit), is fed mutated requests
// in pieces of random size the way Beast's read loop feeds it. No input may
// throw or make the parser hold more than the read buffer's limit.
//
// SLUICE_FUZZ_ITERATIONS and SLUICE_FUZZ_SEED override the defaults (a fixed
// seed, so a failure reproduces; the failing input is printed).
#include <catch2/catch.hpp>

#include <array>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>

#include "common/http_limits.hpp"
#include "upstream/http_fields.hpp"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;

constexpr std::size_t kMaxHeaderBytes = 4096;
constexpr std::uint64_t kMaxBodyBytes = 1 << 20;

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::strtoull(v, nullptr, 10) : fallback;
}

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> seeds = {
      "GET /api/x?a=1 HTTP/1.1\r\nHost: example.test\r\nX-API-Key: k\r\n\r\n",
      "POST /upload HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
      "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;ext=1\r\nhello\r\n3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n",
      "GET / HTTP/1.0\r\n\r\n",
      "PUT /p HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc"
      "GET /next HTTP/1.1\r\nHost: h\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: h\r\nX-Folded: a\r\n b\r\n\r\n",
  };
  return seeds;
}

std::string mutate(std::string s, std::mt19937_64& rng) {
  auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n)(rng); };
  static const std::vector<std::string> tokens = {
      "\r\n", "\n", "\r", ";", ":", " ", "\t", "0", "ffffffffffffffffff", "-1", "0x5",
      "Transfer-Encoding: chunked\r\n", "Content-Length: 7\r\n", "\r\n\r\n", "%00", "\0", "\x7f",
      "chunked, gzip", "HTTP/1.1", "\xff"};
  const std::size_t rounds = 1 + pick(4);
  for (std::size_t r = 0; r < rounds; ++r) {
    const std::size_t at = pick(s.size());
    switch (pick(6)) {
      case 0:  // flip a byte
        if (!s.empty()) s[std::min(at, s.size() - 1)] ^= static_cast<char>(1 + pick(254));
        break;
      case 1:  // insert a token
        s.insert(at, tokens[pick(tokens.size() - 1)]);
        break;
      case 2:  // erase a run
        s.erase(at, pick(16));
        break;
      case 3:  // a long run of one byte (endless lines, huge fields)
        s.insert(at, std::string(pick(3) == 0 ? 70000 : pick(5000), "aA;:\r "[pick(5)]));
        break;
      case 4:  // duplicate a piece
        s.insert(at, s.substr(pick(s.size()), pick(64)));
        break;
      default:  // truncate
        s.resize(at);
        break;
    }
  }
  return s;
}

struct Outcome {
  bool done = false;
  beast::error_code ec;
  std::size_t most_buffered = 0;
};

// Beast's read loop: parse what is buffered; read more (a random amount, no
// more than the buffer's limit leaves) only when the parser needs more.
Outcome parse(std::string_view input, std::mt19937_64& rng,
             std::size_t max_header_bytes = kMaxHeaderBytes) {
  http::request_parser<http::buffer_body, sluice::FieldAllocator<char>> parser;
  parser.header_limit(static_cast<std::uint32_t>(max_header_bytes));
  parser.body_limit(kMaxBodyBytes);
  sluice::ChunkExtensionLimit extension_limit;
  parser.on_chunk_header(extension_limit);
  beast::flat_buffer buffer;
  buffer.max_size(max_header_bytes);
  std::array<char, 8192> body{};
  std::size_t pos = 0;
  Outcome out;
  for (int step = 0; step < 100000; ++step) {
    parser.get().body().data = body.data();  // what was relayed is gone
    parser.get().body().size = body.size();
    beast::error_code ec;
    buffer.consume(parser.put(buffer.data(), ec));
    if (ec == http::error::need_buffer) continue;
    if (ec && ec != http::error::need_more) {
      out.ec = ec;
      return out;
    }
    if (parser.is_done()) {
      out.done = true;
      return out;
    }
    if (!ec && buffer.size() > 0 && parser.is_header_done()) continue;  // more to parse
    if (pos == input.size()) {
      out.ec = http::error::partial_message;
      return out;
    }
    const std::size_t room = buffer.max_size() - buffer.size();
    if (room == 0) {
      out.ec = http::error::buffer_overflow;
      return out;
    }
    const std::size_t n = std::min(
        {room, input.size() - pos, std::uniform_int_distribution<std::size_t>(1, 65536)(rng)});
    auto mb = buffer.prepare(n);
    std::memcpy(mb.data(), input.data() + pos, n);
    buffer.commit(n);
    pos += n;
    out.most_buffered = std::max(out.most_buffered, buffer.size());
  }
  FAIL("parser made no progress");
  return out;
}

}  // namespace

TEST_CASE("http parser fuzz: mutated requests never throw nor outgrow the read buffer") {
  const auto iterations = env_or("SLUICE_FUZZ_ITERATIONS", 200000);
  const auto seed = env_or("SLUICE_FUZZ_SEED", 20261122);
  std::mt19937_64 rng(seed);
  std::size_t completed = 0;
  std::size_t refused = 0;
  for (std::uint64_t i = 0; i < iterations; ++i) {
    const auto& seeds = corpus();
    const std::string input =
        mutate(seeds[std::uniform_int_distribution<std::size_t>(0, seeds.size() - 1)(rng)], rng);
    Outcome out;
    try {
      out = parse(input, rng);
    } catch (const std::exception& e) {
      FAIL("iteration " << i << " threw " << e.what() << " on input of " << input.size()
                        << " bytes: " << input.substr(0, 300));
    }
    REQUIRE(out.most_buffered <= kMaxHeaderBytes);
    (out.done ? completed : refused)++;
  }
  // The mutations must leave some requests valid and refuse others, or the
  // fuzzer is not exercising both paths.
  CHECK(completed > iterations / 20);
  CHECK(refused > iterations / 20);
}

TEST_CASE("http parser: the trailer and chunk-line bounds hold exactly") {
  std::mt19937_64 rng(1);
  const std::string head = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
  // A trailer field as long as Beast's field table cannot hold is refused, not thrown.
  auto huge_trailer = parse(head + "0\r\nX: " + std::string(65534, 'A') + "\r\n\r\n", rng);
  CHECK_FALSE(huge_trailer.done);
  CHECK(huge_trailer.ec == http::error::buffer_overflow);
  // An endless chunk extension stops at the buffer's limit.
  auto endless = parse(head + "5;" + std::string(1 << 20, 'a'), rng);
  CHECK(endless.ec == http::error::buffer_overflow);
  CHECK(endless.most_buffered <= kMaxHeaderBytes);
  // Extensions up to the limit are accepted; one byte more is refused.
  auto at_limit = parse(head + "1;" + std::string(sluice::kMaxChunkExtensionBytes - 1, 'e') +
                            "\r\nx\r\n0\r\n\r\n",
                        rng, 16384);
  CHECK(at_limit.done);
  auto over_limit = parse(head + "1;" + std::string(sluice::kMaxChunkExtensionBytes, 'e') +
                              "\r\nx\r\n0\r\n\r\n",
                          rng, 16384);
  CHECK(over_limit.ec == http::error::bad_chunk_extension);
}
