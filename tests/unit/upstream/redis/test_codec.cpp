// Command encoding (binary-safe RESP argv), script SHA-1s and backoff delays.
#include <catch2/catch.hpp>
#include <string>

#include "upstream/redis/backoff.hpp"
#include "upstream/redis/codec.hpp"
#include "upstream/redis/reply.hpp"

using namespace std::chrono_literals;

TEST_CASE("codec: commands are encoded as binary-safe RESP arrays", "[redis][codec]") {
  sluice::redis::CommandEncoder encoder;
  std::string out;
  encoder.add("SET");
  encoder.add("k");
  const std::string binary("a\0b", 3);  // the encoder holds views: keep it alive
  encoder.add(binary);
  REQUIRE(encoder.append_to(out));
  CHECK(out == std::string("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\na\0b\r\n", 29));
  encoder.add("PING");
  encoder.add("");
  REQUIRE(encoder.append_to(out));
  CHECK(out.ends_with("*2\r\n$4\r\nPING\r\n$0\r\n\r\n"));
  CHECK_FALSE(encoder.append_to(out));  // nothing added
}

TEST_CASE("codec: a script's SHA-1", "[redis][codec]") {
  CHECK(sluice::redis::script_sha1("") == "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  const sluice::redis::Script script("return 1");
  CHECK(script.sha1() == "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
  CHECK(script.body() == "return 1");
}

TEST_CASE("reply reader: whole, split and malformed replies", "[redis][codec]") {
  sluice::redis::ReplyReader reader;
  REQUIRE(reader.valid());
  sluice::redis::Reply reply;
  using Result = sluice::redis::ReplyReader::Result;
  REQUIRE(reader.feed("*2\r\n:7\r\n$2\r\nh", 13));
  CHECK(reader.next(reply) == Result::kNeedMore);
  REQUIRE(reader.feed("i\r\n+OK\r\n", 8));
  REQUIRE(reader.next(reply) == Result::kReply);
  REQUIRE(reply.type == sluice::redis::Reply::Type::kArray);
  REQUIRE(reply.elements.size() == 2);
  CHECK(reply.elements[0].integer == 7);
  CHECK(reply.elements[1].str == "hi");
  REQUIRE(reader.next(reply) == Result::kReply);
  CHECK(reply.type == sluice::redis::Reply::Type::kStatus);
  CHECK(reader.next(reply) == Result::kNeedMore);
  REQUIRE(reader.feed("?bad\r\n", 6));
  CHECK(reader.next(reply) == Result::kError);
}

TEST_CASE("backoff: doubling with equal jitter, capped, reset after success", "[redis][backoff]") {
  sluice::redis::Backoff backoff(100ms, 1000ms, 1);
  auto in = [](std::chrono::milliseconds d, long lo, long hi) {
    return d.count() >= lo && d.count() <= hi;
  };
  CHECK(in(backoff.next(), 50, 100));
  CHECK(in(backoff.next(), 100, 200));
  CHECK(in(backoff.next(), 200, 400));
  CHECK(in(backoff.next(), 400, 800));
  CHECK(in(backoff.next(), 500, 1000));
  CHECK(in(backoff.next(), 500, 1000));
  backoff.reset();
  CHECK(in(backoff.next(), 50, 100));
}
