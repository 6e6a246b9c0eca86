#include <catch2/catch.hpp>

#include "gateway/session/local_reply.hpp"

using namespace sluice;

namespace {

LocalReply limited_reply() {
  LocalReply reply;
  reply.status = 429;
  reply.body = "{}\n";
  reply.headers = {{"Retry-After", "3"}};
  return reply;
}

}  // namespace

TEST_CASE("A local reply's head: status line, fixed fields, the lists, then framing", "[local]") {
  const HeaderList steps = {{"X-RateLimit-Limit", "10"}, {"X-RateLimit-Remaining", "0"}};
  std::string head = "left over from the last reply";
  serialize_local_head(head, limited_reply(),
                       {.request_id = "abc", .steps = &steps, .content_length = 3});
  CHECK(head ==
        "HTTP/1.1 429 Too Many Requests\r\n"
        "Server: sluice\r\n"
        "Content-Type: application/json\r\n"
        "X-Request-Id: abc\r\n"
        "X-RateLimit-Limit: 10\r\n"
        "X-RateLimit-Remaining: 0\r\n"
        "Retry-After: 3\r\n"
        "Content-Length: 3\r\n"
        "\r\n");
}

TEST_CASE("A later field replaces an earlier one of the same name, in any case", "[local]") {
  LocalReply reply = limited_reply();
  reply.content_type = "text/plain";
  reply.headers = {{"retry-after", "9"}, {"CONTENT-TYPE", "application/problem+json"}};
  const HeaderList steps = {{"Retry-After", "3"}};
  std::string head;
  serialize_local_head(head, reply, {.request_id = "r", .steps = &steps, .content_length = 0});
  CHECK(head ==
        "HTTP/1.1 429 Too Many Requests\r\n"
        "Server: sluice\r\n"
        "X-Request-Id: r\r\n"
        "retry-after: 9\r\n"
        "CONTENT-TYPE: application/problem+json\r\n"
        "Content-Length: 0\r\n"
        "\r\n");
}

TEST_CASE("A local reply frames itself: framing names in the lists are dropped", "[local]") {
  LocalReply reply = limited_reply();
  reply.headers = {{"Content-Length", "999"}, {"Transfer-Encoding", "chunked"},
                   {"connection", "upgrade"}};
  std::string head;
  serialize_local_head(head, reply, {.request_id = "r", .content_length = 3, .keep_alive = false});
  CHECK(head ==
        "HTTP/1.1 429 Too Many Requests\r\n"
        "Server: sluice\r\n"
        "Content-Type: application/json\r\n"
        "X-Request-Id: r\r\n"
        "Content-Length: 3\r\n"
        "Connection: close\r\n"
        "\r\n");
}

TEST_CASE("An HTTP/1.0 client kept alive is told so", "[local]") {
  LocalReply reply = limited_reply();
  reply.status = 503;
  reply.headers.clear();
  std::string head;
  serialize_local_head(head, reply,
                       {.request_id = "r", .content_length = 3, .announce_keep_alive = true});
  CHECK(head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"));
  CHECK(head.ends_with("Content-Length: 3\r\nConnection: keep-alive\r\n\r\n"));
}
