// The access-log line: every documented field on every line (null when it
// does not apply), the decision fields, and JSON escaping of odd bytes.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "middleware/access_log_line.hpp"

using namespace sluice;

namespace access_log_line_test {

std::string escaped(std::string_view text) {
  std::string out;
  append_json_string(out, text);
  return out;
}

TEST_CASE("access log: strings are escaped, bad UTF-8 replaced", "[access-log]") {
  CHECK(escaped("plain") == "\"plain\"");
  CHECK(escaped("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(escaped("cr\rlf\ntab\t") == "\"cr\\rlf\\ntab\\t\"");
  CHECK(escaped(std::string("nul\0x", 5)) == "\"nul\\u0000x\"");
  CHECK(escaped("\x1b") == "\"\\u001b\"");
  CHECK(escaped("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") ==
        "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");  // well-formed UTF-8 kept
  const std::string fffd = "\xEF\xBF\xBD";
  CHECK(escaped("\xff") == "\"" + fffd + "\"");
  CHECK(escaped("\xc0\xaf") == "\"" + fffd + fffd + "\"");      // overlong
  CHECK(escaped("\xed\xa0\x80") == "\"" + fffd + fffd + fffd + "\"");  // a surrogate
  CHECK(escaped("\xf4\x90\x80\x80") == "\"" + fffd + fffd + fffd + fffd + "\"");  // > U+10FFFF
  CHECK(escaped("\xe2\x82") == "\"" + fffd + fffd + "\"");  // cut short
  // Whatever goes in, the output parses as JSON.
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  CHECK_NOTHROW(nlohmann::json::parse(escaped(all)));
}

TEST_CASE("access log: a line has every field, null where it does not apply", "[access-log]") {
  ExchangeSummary s;
  s.method = "GET";
  s.protocol = "HTTP/2";
  s.target = "/a/b?key=secret";
  s.status = 429;
  s.request_id = "r1";
  s.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  s.route = "api";
  s.duration_seconds = 0.0125;
  DecisionRecord d;
  d.decision = "limited";
  d.consumer = "c-1";
  d.plan = "free";
  d.limit = "per_key";
  d.remaining = 0;
  d.cost = 2;
  s.decision = &d;
  const std::string text = access_log_line(s, 1700000000123);
  REQUIRE(text.back() == '\n');
  const auto line = nlohmann::json::parse(text);
  CHECK(line.size() == 21);
  CHECK(line["attempts"] == 0);  // a local reply: no server was tried
  CHECK(line["servers_tried"] == nlohmann::json::array());
  CHECK(line["protocol"] == "HTTP/2");
  CHECK(line["ts"] == "2023-11-14T22:13:20.123Z");
  CHECK(line["path"] == "/a/b");  // never the query
  CHECK(line["decision"] == "limited");
  CHECK(line["limit"] == "per_key");
  CHECK(line["remaining"] == 0);
  CHECK(line["cost"] == 2);
  CHECK(line["settled_cost"].is_null());
  CHECK(line["upstream"] == "");  // a local reply: as the log always had it
  CHECK(line["duration_ms"] == 12.5);
  CHECK(line["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736");

  ExchangeSummary bare;  // no head: no decision
  const auto none = nlohmann::json::parse(access_log_line(bare, 0));
  CHECK(none.size() == 21);
  CHECK(none["protocol"].is_null());
  CHECK(none["decision"] == "none");
  CHECK(none["consumer"].is_null());
  CHECK(none["method"] == "");
  CHECK(none["trace_id"].is_null());
}

TEST_CASE("access log: a line, byte for byte", "[access-log]") {
  ExchangeSummary s;
  s.method = "POST";
  s.protocol = "HTTP/1.1";
  s.target = "/v1/chat?x=1";
  s.status = 200;
  s.request_id = "0123456789abcdef";
  s.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  s.route = "chat \"beta\"";
  s.client_ip = *parse_ip("2001:db8::7");
  s.upstream_server = "127.0.0.1:8080";
  s.attempts = 3;
  s.servers_tried = "127.0.0.1:8081,[::1]:8082,127.0.0.1:8080";
  s.duration_seconds = 0.0012345;
  DecisionRecord d;
  d.decision = "allowed";
  d.consumer = "k:3f2a";
  d.plan = "gold";
  d.limit = "per_key";
  d.remaining = 99.5;
  d.cost = 1e21;
  d.settled_cost = 0.001;
  s.decision = &d;
  CHECK(access_log_line(s, 1764633600007) ==
        R"({"ts":"2025-12-02T00:00:00.007Z","request_id":"0123456789abcdef",)"
        R"("trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","client_ip":"2001:db8::7",)"
        R"("method":"POST","protocol":"HTTP/1.1","path":"/v1/chat","route":"chat \"beta\"",)"
        R"("status":200,"duration_ms":1.235,"upstream":"127.0.0.1:8080","attempts":3,)"
        R"("servers_tried":["127.0.0.1:8081","[::1]:8082","127.0.0.1:8080"],"local":false,)"
        R"("decision":"allowed","consumer":"k:3f2a","plan":"gold","limit":"per_key",)"
        R"("remaining":99.5,"cost":1e+21,"settled_cost":0.001})"
        "\n");
  // The same second again, and a moment before the epoch's first second ends.
  CHECK(access_log_line(s, 1764633600999).substr(0, 32) == R"({"ts":"2025-12-02T00:00:00.999Z")");
  CHECK(access_log_line(s, 999).substr(0, 32) == R"({"ts":"1970-01-01T00:00:00.999Z")");
  // A clock before the epoch or past the year 9999: written as it always was.
  CHECK(access_log_line(s, -500).substr(0, 33) == R"({"ts":"1970-01-01T00:00:00.-500Z")");
  CHECK(access_log_line(s, -1500).substr(0, 33) == R"({"ts":"1969-12-31T23:59:59.-500Z")");
  CHECK(access_log_line(s, 253'402'300'800'000).substr(0, 33) ==
        R"({"ts":"10000-01-01T00:00:00.000Z")");
  // Appended after other lines, a line is the same.
  std::string lines = access_log_line(s, 1764633600007);
  append_access_log_line(lines, s, 1764633600007);
  CHECK(lines == access_log_line(s, 1764633600007) + access_log_line(s, 1764633600007));
}

}  // namespace access_log_line_test
