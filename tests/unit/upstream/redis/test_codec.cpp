// Command encoding (binary-safe RESP argv), script SHA-1s and backoff delays.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

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

TEST_CASE("reply reader: every type, nested arrays and a reply after a reply, fed a byte at a time",
          "[redis][codec]") {
  using sluice::redis::Reply;
  using Result = sluice::redis::ReplyReader::Result;
  sluice::redis::ReplyReader reader;
  REQUIRE(reader.valid());
  const std::string stream =
      "*5\r\n$-1\r\n*2\r\n-ERR no\r\n*1\r\n:-3\r\n$20\r\nabcdefghijklmnopqrst\r\n*-1\r\n*0\r\n"
      ":42\r\n"
      "$0\r\n\r\n"
      "-NOSCRIPT gone\r\n";
  std::vector<Reply> got;
  Reply reply;
  for (char c : stream) {
    REQUIRE(reader.feed(&c, 1));
    Result result;
    while ((result = reader.next(reply)) == Result::kReply) got.push_back(std::move(reply));
    REQUIRE(result == Result::kNeedMore);
  }
  REQUIRE(got.size() == 4);
  const Reply& top = got[0];
  REQUIRE(top.type == Reply::Type::kArray);
  REQUIRE(top.elements.size() == 5);
  CHECK(top.elements[0].type == Reply::Type::kNil);
  const Reply& pair = top.elements[1];
  REQUIRE(pair.type == Reply::Type::kArray);
  REQUIRE(pair.elements.size() == 2);
  CHECK(pair.elements[0].type == Reply::Type::kError);
  CHECK(pair.elements[0].str == "ERR no");
  REQUIRE(pair.elements[1].type == Reply::Type::kArray);
  REQUIRE(pair.elements[1].elements.size() == 1);
  CHECK(pair.elements[1].elements[0].type == Reply::Type::kInteger);
  CHECK(pair.elements[1].elements[0].integer == -3);
  CHECK(top.elements[2].type == Reply::Type::kString);
  CHECK(top.elements[2].str == "abcdefghijklmnopqrst");
  CHECK(top.elements[3].type == Reply::Type::kNil);  // a nil array
  CHECK(top.elements[4].type == Reply::Type::kArray);
  CHECK(top.elements[4].elements.empty());
  // The roots after an array start clean: no elements, string or integer left over.
  CHECK(got[1].type == Reply::Type::kInteger);
  CHECK(got[1].integer == 42);
  CHECK(got[1].elements.empty());
  CHECK(got[2].type == Reply::Type::kString);
  CHECK(got[2].str.empty());
  CHECK(got[2].integer == 0);
  CHECK(got[3].type == Reply::Type::kError);
  CHECK(got[3].str == "NOSCRIPT gone");
  CHECK(got[3].integer == 0);
}

TEST_CASE("reply reader: a reply's strings and elements are reused once it is destroyed",
          "[redis][codec]") {
  using Result = sluice::redis::ReplyReader::Result;
  sluice::redis::ReplyReader reader;
  const std::string long_text(40, 'x');
  const std::string one = "*2\r\n$40\r\n" + long_text + "\r\n:1\r\n";
  const char* text = nullptr;
  const sluice::redis::Reply* elements = nullptr;
  {
    sluice::redis::Reply reply;
    REQUIRE(reader.feed(one.data(), one.size()));
    REQUIRE(reader.next(reply) == Result::kReply);
    REQUIRE(reply.elements.size() == 2);
    text = reply.elements[0].str.data();
    elements = reply.elements.data();
  }  // destroyed: its memory goes to this thread's spares
  sluice::redis::Reply again;
  REQUIRE(reader.feed(one.data(), one.size()));
  REQUIRE(reader.next(again) == Result::kReply);
  REQUIRE(again.elements.size() == 2);
  CHECK(again.elements[0].str == long_text);
  CHECK(again.elements[1].integer == 1);
#if !defined(__SANITIZE_ADDRESS__)  // there, nothing is kept (common/spares.hpp)
  CHECK(again.elements.data() == elements);
  CHECK(again.elements[0].str.data() == text);
#else
  (void)text;
  (void)elements;
#endif
}

TEST_CASE("reply reader: a stream broken inside an array is an error, and stays one",
          "[redis][codec]") {
  using Result = sluice::redis::ReplyReader::Result;
  sluice::redis::ReplyReader reader;
  sluice::redis::Reply reply;
  const std::string bad = "*3\r\n:1\r\n$3\r\nabc\r\n!oops\r\n";
  REQUIRE(reader.feed(bad.data(), bad.size()));
  CHECK(reader.next(reply) == Result::kError);
  CHECK_FALSE(reader.error().empty());
  CHECK_FALSE(reader.feed(":1\r\n", 4));
  CHECK(reader.next(reply) == Result::kError);
}

TEST_CASE("reply reader: an array's length takes no memory before its elements come",
          "[redis][codec]") {
  using Result = sluice::redis::ReplyReader::Result;
  sluice::redis::ReplyReader reader;
  sluice::redis::Reply reply;
  // A billion elements announced, two sent: room for all of them at once
  // would be tens of gigabytes (an allocation failure, the reader broken).
  const std::string head = "*1000000000\r\n:1\r\n:2\r\n";
  REQUIRE(reader.feed(head.data(), head.size()));
  CHECK(reader.next(reply) == Result::kNeedMore);
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
