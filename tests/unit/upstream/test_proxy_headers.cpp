#include <catch2/catch.hpp>

#include <boost/beast/http/fields.hpp>

#include "gateway/session/local_reply.hpp"
#include "upstream/h2/h2_header_block.hpp"
#include "upstream/proxy_headers.hpp"

namespace http = boost::beast::http;
using namespace sluice;

TEST_CASE("hop-by-hop headers and the names Connection lists are removed", "[proxy_headers]") {
  sluice::HttpFields f;
  f.set("Connection", "keep-alive, X-Secret");
  f.insert("Connection", "Upgrade,  X-Other ");
  f.set("X-Secret", "1");
  f.set("X-Other", "2");
  f.set("Keep-Alive", "timeout=5");
  f.set("Proxy-Connection", "keep-alive");
  f.set("TE", "trailers");
  f.set("Trailer", "X-T");
  f.set("Transfer-Encoding", "chunked");
  f.set("Upgrade", "websocket");
  f.set("Proxy-Authorization", "Basic abc");
  f.set("Proxy-Authenticate", "Basic");
  f.set("X-Kept", "yes");
  f.set("Content-Length", "10");
  strip_hop_by_hop(f);
  for (auto name :
       {"Connection", "X-Secret", "X-Other", "Keep-Alive", "Proxy-Connection", "TE", "Trailer",
        "Transfer-Encoding", "Upgrade", "Proxy-Authorization", "Proxy-Authenticate"}) {
    INFO(name);
    CHECK(f.count(name) == 0);
  }
  CHECK(f["X-Kept"] == "yes");
  CHECK(f["Content-Length"] == "10");
}

TEST_CASE("the connection-specific names, in any case", "[proxy_headers]") {
  for (auto name : {"connection", "Keep-Alive", "PROXY-CONNECTION", "transfer-encoding",
                    "Upgrade"}) {
    INFO(name);
    CHECK(is_connection_specific(name));
  }
  // Hop-by-hop over HTTP/1.1, but HTTP/2 carries them (TE: trailers) or they
  // are end to end.
  for (auto name : {"te", "trailer", "proxy-authorization", "host", "content-length",
                    "x-connection", "connectio", "", "upgrades", "x-trace", "keep_alive",
                    "connectiom", "proxy-connectiox", "transfer-encodinf", "content-type"}) {
    INFO(name);
    CHECK_FALSE(is_connection_specific(name));
  }
}

TEST_CASE("a client cannot strip forwarded headers through Connection", "[proxy_headers]") {
  sluice::HttpFields f;
  f.set("Host", "example.com");
  f.set("Connection", "X-Forwarded-For, X-Request-Id, Via");
  f.set("X-Forwarded-For", "10.0.0.1");
  strip_hop_by_hop(f);  // removes the client's own X-Forwarded-For
  std::string head;
  serialize_request_head(head, "GET", "/a?b=1", f,
                         ForwardedInfo{"127.0.0.1", "http", "example.com", "abc"}, false);
  CHECK(head ==
        "GET /a?b=1 HTTP/1.1\r\n"
        "Host: example.com\r\n"
        "X-Forwarded-For: 127.0.0.1\r\n"
        "X-Forwarded-Proto: http\r\n"
        "X-Forwarded-Host: example.com\r\n"
        "X-Request-Id: abc\r\n"
        "Via: 1.1 sluice\r\n"
        "\r\n");
}

TEST_CASE("request head: forwarded headers appended, framing redone", "[proxy_headers]") {
  sluice::HttpFields f;
  f.set("Host", "api.example.com:8080");
  f.insert("X-Forwarded-For", "203.0.113.7");
  f.insert("X-Custom", "a");
  f.insert("X-Forwarded-For", "10.0.0.2, 10.0.0.3");
  f.set("Via", "1.0 edge");
  f.set("X-Forwarded-Proto", "https");
  f.set("X-Request-Id", "old");
  f.set("Expect", "100-continue");
  f.insert("X-Custom", "b");
  std::string head;
  serialize_request_head(head, "POST", "/x", f,
                         ForwardedInfo{"127.0.0.1", "http", "api.example.com:8080", "id-1"}, true);
  CHECK(head ==
        "POST /x HTTP/1.1\r\n"
        "Host: api.example.com:8080\r\n"
        "X-Custom: a\r\n"
        "X-Custom: b\r\n"
        "X-Forwarded-For: 203.0.113.7, 10.0.0.2, 10.0.0.3, 127.0.0.1\r\n"
        "X-Forwarded-Proto: http\r\n"
        "X-Forwarded-Host: api.example.com:8080\r\n"
        "X-Request-Id: id-1\r\n"
        "Via: 1.0 edge, 1.1 sluice\r\n"
        "Transfer-Encoding: chunked\r\n"
        "\r\n");
}

TEST_CASE("Connection cannot strip Content-Length or Host", "[proxy_headers]") {
  sluice::HttpFields f;
  f.set("Host", "h");
  f.set("Connection", "Content-Length, Host, X-A");
  f.set("Content-Length", "5");
  f.set("X-A", "1");
  strip_hop_by_hop(f);
  CHECK(f["Content-Length"] == "5");
  CHECK(f["Host"] == "h");
  CHECK(f.count("X-A") == 0);
  std::string head;
  serialize_request_head(head, "POST", "/", f, ForwardedInfo{"1.2.3.4", "http", "h", "id"}, false,
                         5);
  CHECK(head.find("Content-Length: 5\r\n") != std::string::npos);
  serialize_request_head(head, "POST", "/", f, ForwardedInfo{"1.2.3.4", "http", "h", "id"}, true,
                         5);
  CHECK(head.find("Content-Length") == std::string::npos);
  CHECK(head.find("Transfer-Encoding: chunked\r\n") != std::string::npos);
}

TEST_CASE("request head without Host (HTTP/1.0) gets the upstream's", "[proxy_headers]") {
  sluice::HttpFields f;
  f.set("X-Forwarded-Host", "spoofed");
  std::string head;
  serialize_request_head(head, "GET", "/", f, ForwardedInfo{"::1", "http", "", "id", "10.0.0.9:80"},
                         false);
  CHECK(head.find("X-Forwarded-Host") == std::string::npos);
  CHECK(head.find("Host: 10.0.0.9:80\r\n") != std::string::npos);
  CHECK(head.find("X-Forwarded-For: ::1\r\n") != std::string::npos);
}

TEST_CASE("request head: the dropped headers are not forwarded, in any case", "[proxy_headers]") {
  sluice::HttpFields f;
  f.set("Host", "h");
  f.insert("x-cost", "7");
  f.insert("X-COST", "8");
  f.insert("X-Costly", "kept");
  f.insert("x-usage-tokens", "0");
  std::string head;
  ForwardedInfo info{"1.2.3.4", "http", "h", "id"};
  info.drop_headers = {"X-Cost", "X-Usage-Tokens"};
  serialize_request_head(head, "GET", "/", f, info, false);
  CHECK(head.find("7") == std::string::npos);
  CHECK(head.find("8") == std::string::npos);
  CHECK(head.find("usage") == std::string::npos);
  CHECK(head.find("X-Costly: kept\r\n") != std::string::npos);
  info.drop_headers = {"", "X-Usage-Tokens"};  // a route without a cost header
  serialize_request_head(head, "GET", "/", f, info, false);
  CHECK(head.find("x-cost: 7\r\n") != std::string::npos);
  CHECK(head.find("usage") == std::string::npos);
  info.drop_headers = {};
  serialize_request_head(head, "GET", "/", f, info, false);
  CHECK(head.find("x-usage-tokens: 0\r\n") != std::string::npos);
}

TEST_CASE("request head: a traceparent Sluice started goes after Via", "[proxy_headers]") {
  sluice::HttpFields f;
  f.set("Host", "h");
  std::string head;
  ForwardedInfo info{"1.2.3.4", "http", "h", "id"};
  serialize_request_head(head, "GET", "/", f, info, false);
  CHECK(head.find("traceparent") == std::string::npos);  // none started: none added
  info.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
  serialize_request_head(head, "GET", "/", f, info, false);
  CHECK(head.find("Via: 1.1 sluice\r\n"
                  "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00\r\n") !=
        std::string::npos);
}

TEST_CASE("response head: hop-by-hop out, Sluice's headers in", "[proxy_headers]") {
  sluice::HttpFields f;
  f.set("Content-Type", "text/plain");
  f.set("Connection", "X-Secret, keep-alive, Content-Length");
  f.set("X-Secret", "1");
  f.set("Keep-Alive", "timeout=5");
  f.set("Transfer-Encoding", "chunked");
  f.set("Proxy-Authenticate", "Basic");
  f.set("X-RateLimit-Limit", "from-upstream");
  f.set("X-Request-Id", "upstream-id");
  f.set("Content-Length", "12");
  const std::vector<std::pair<std::string, std::string>> extra = {{"X-RateLimit-Limit", "50"}};
  ResponseHeadOptions options;
  options.request_id = "rid";
  options.extra = extra;
  options.chunked = false;
  options.content_length = 12;  // from the parser: Connection cannot hide it
  options.keep_alive = false;
  std::string head;
  serialize_response_head(head, 200, "OK", f, options);
  CHECK(head ==
        "HTTP/1.1 200 OK\r\n"
        "Content-Type: text/plain\r\n"
        "X-RateLimit-Limit: 50\r\n"
        "X-Request-Id: rid\r\n"
        "Content-Length: 12\r\n"
        "Connection: close\r\n"
        "\r\n");
  options.chunked = true;
  options.content_length.reset();
  options.keep_alive = true;
  options.announce_keep_alive = true;
  serialize_response_head(head, 404, "", sluice::HttpFields{}, options);
  CHECK(head ==
        "HTTP/1.1 404 Not Found\r\n"
        "X-RateLimit-Limit: 50\r\n"
        "X-Request-Id: rid\r\n"
        "Transfer-Encoding: chunked\r\n"
        "Connection: keep-alive\r\n"
        "\r\n");
}

TEST_CASE("an HTTP/2 client's response fields are the HTTP/1.1 head's, lower-case, unframed",
          "[proxy_headers]") {
  sluice::HttpFields f;
  f.set("Content-Type", "text/plain");
  f.set("Connection", "X-Secret");
  f.set("X-Secret", "1");
  f.set("Keep-Alive", "timeout=5");
  f.set("Transfer-Encoding", "chunked");
  f.set("X-RateLimit-Limit", "from-upstream");
  f.set("X-Request-Id", "upstream-id");
  f.set("Content-Length", "12");
  const std::vector<std::pair<std::string, std::string>> extra = {{"X-RateLimit-Limit", "50"}};
  HeaderRules rules;
  rules.add_remove("content-type");
  HeaderTemplate by;
  REQUIRE(by.parse("sluice ${route}").empty());
  rules.add_set("X-Served-By", by);
  ResponseHeadOptions options;
  options.request_id = "rid";
  options.extra = extra;
  options.rules = &rules;
  options.vars = {"10.0.0.1", "rid", "api", "https"};
  options.content_length = 12;
  sluice::H2HeaderBlock out;
  response_fields(out, f, options);
  const std::vector<std::pair<std::string_view, std::string_view>> expected = {
      {"x-ratelimit-limit", "50"},
      {"x-request-id", "rid"},
      {"x-served-by", "sluice api"},
      {"content-length", "12"}};
  REQUIRE(out.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(out.field(i) == expected[i]);
  // The request id changes with every response: never indexed; the rest may be.
  CHECK(out.never_indexed(1));
  CHECK_FALSE(out.never_indexed(0));
  // nghttp2's list: the status first, then the fields as they are.
  const auto nva = out.nva("200");
  REQUIRE(nva.size() == 5);
  CHECK(std::string_view(reinterpret_cast<const char*>(nva[0].name), nva[0].namelen) ==
        ":status");
  CHECK(std::string_view(reinterpret_cast<const char*>(nva[0].value), nva[0].valuelen) == "200");
  CHECK(std::string_view(reinterpret_cast<const char*>(nva[4].value), nva[4].valuelen) == "12");
  CHECK(nva[2].flags == NGHTTP2_NV_FLAG_NO_INDEX);
  options.content_length.reset();
  response_fields(out, sluice::HttpFields{}, options);
  CHECK(out.size() == 3);  // reused: cleared first, no length without one
}

TEST_CASE("an HTTP/2 header block: names lower-cased, changing values never indexed",
          "[proxy_headers]") {
  sluice::H2HeaderBlock block;
  block.add("X-RateLimit-Remaining", "41");
  block.add("RateLimit", "\"per_key\";r=41;t=3");
  block.add("X-RateLimit-Limit", "50");
  // Many fields: the buffer grows, and every field still reads as added.
  for (int i = 0; i < 200; ++i) block.add("X-Filler-" + std::to_string(i), std::string(40, 'v'));
  CHECK(block.field(0) == std::pair<std::string_view, std::string_view>{"x-ratelimit-remaining",
                                                                         "41"});
  CHECK(block.never_indexed(0));
  CHECK(block.never_indexed(1));
  CHECK_FALSE(block.never_indexed(2));
  CHECK(block.field(202).first == "x-filler-199");
  const auto nva = block.nva();
  REQUIRE(nva.size() == 203);
  CHECK(std::string_view(reinterpret_cast<const char*>(nva[202].name), nva[202].namelen) ==
        "x-filler-199");
  block.clear();
  CHECK(block.size() == 0);
  CHECK(block.nva("404").size() == 1);
}

TEST_CASE("an HTTP/2 header block: request and trace ids are never indexed, by name",
          "[proxy_headers]") {
  using sluice::h2_changes_per_message;
  for (const char* name : {"x-request-id", "traceparent", "tracestate", "b3", "x-b3-traceid",
                           "x-b3-spanid", "x-b3-sampled", "uber-trace-id", "x-amzn-trace-id",
                           "x-cloud-trace-context", "x-correlation-id", "x-seen-x-request-id",
                           "x-amz-requestid", "x-span-id", "x-ratelimit-remaining",
                           "x-ratelimit-reset", "ratelimit", "retry-after"}) {
    INFO(name);
    CHECK(h2_changes_per_message(name));
  }
  for (const char* name : {":path", ":authority", "content-type", "te", "user-agent", "id", "b",
                           "x-forwarded-for", "x-ratelimit-limit", "ratelimit-policy",
                           "x-request", "grpc-status", "x-tenant-id", "accept", ""}) {
    INFO(name);
    CHECK_FALSE(h2_changes_per_message(name));
  }
  // A request head for an upstream: the same rule, field by field.
  const sluice::H2HeaderBlock head = {{":method", "POST"},
                                      {":path", "/pkg.Svc/Call"},
                                      {"X-Request-Id", "0af7651916cd43dd"},
                                      {"content-type", "application/grpc"}};
  CHECK_FALSE(head.never_indexed(1));
  CHECK(head.never_indexed(2));
  CHECK(head[2] == sluice::H2HeaderBlock::Field{"x-request-id", "0af7651916cd43dd"});
  CHECK(head.nva()[2].flags == NGHTTP2_NV_FLAG_NO_INDEX);
  CHECK(head.nva()[3].flags == NGHTTP2_NV_FLAG_NONE);
  // Copies compare equal field by field.
  sluice::H2HeaderBlock copy = head;
  CHECK(copy == head);
  copy.add("te", "trailers");
  CHECK_FALSE(copy == head);
}

namespace {

HeaderTemplate header_template(std::string_view text) {
  HeaderTemplate t;
  REQUIRE(t.parse(text).empty());
  return t;
}

}  // namespace

TEST_CASE("request head: a route's rules apply after Sluice's headers", "[proxy_headers]") {
  HeaderRules rules;
  rules.add_set("X-Client", header_template("${client_ip} via ${route}"));
  rules.add_remove("cookie");
  rules.add_set("X-Tenant", header_template("acme"));
  sluice::HttpFields f;
  f.set("Host", "example.com");
  f.insert("X-Tenant", "spoofed-1");
  f.insert("Cookie", "a=1");
  f.insert("x-tenant", "spoofed-2");
  f.insert("X-Kept", "1");
  f.insert("COOKIE", "b=2");
  f.set("Content-Length", "3");
  ForwardedInfo info{"127.0.0.1", "http", "example.com", "rid"};
  info.rules = &rules;
  info.vars = {"203.0.113.9", "rid", "orders", "http"};
  std::string head;
  serialize_request_head(head, "POST", "/", f, info, false, 3);
  CHECK(head ==
        "POST / HTTP/1.1\r\n"
        "Host: example.com\r\n"
        "X-Kept: 1\r\n"
        "X-Forwarded-For: 127.0.0.1\r\n"
        "X-Forwarded-Proto: http\r\n"
        "X-Forwarded-Host: example.com\r\n"
        "X-Request-Id: rid\r\n"
        "Via: 1.1 sluice\r\n"
        "X-Client: 203.0.113.9 via orders\r\n"
        "X-Tenant: acme\r\n"
        "Content-Length: 3\r\n"
        "\r\n");
  // Without rules the same fields pass as they came.
  serialize_request_head(head, "POST", "/", f, ForwardedInfo{"127.0.0.1", "http", "", "rid"}, false,
                         3);
  CHECK(head.find("X-Tenant: spoofed-1\r\n") != std::string::npos);
  CHECK(head.find("Cookie: a=1\r\n") != std::string::npos);
  CHECK(head.find("X-Client") == std::string::npos);
}

TEST_CASE("response head: a route's rules apply after Sluice's headers", "[proxy_headers]") {
  HeaderRules rules;
  rules.add_remove("Server");
  rules.add_set("Cache-Control", header_template("no-store"));
  rules.add_set("X-Served-By", header_template("${route} ${request_id} ${scheme}"));
  sluice::HttpFields f;
  f.set("Server", "backend/1.0");
  f.insert("Cache-Control", "public");
  f.insert("Content-Type", "text/plain");
  f.insert("cache-control", "max-age=60");
  const std::pair<std::string, std::string> limits[] = {{"X-RateLimit-Limit", "50"}};
  ResponseHeadOptions options;
  options.request_id = "rid";
  options.extra = limits;
  options.content_length = 5;
  options.rules = &rules;
  options.vars = {"203.0.113.9", "rid", "orders", "https"};
  std::string head;
  serialize_response_head(head, 200, "OK", f, options);
  CHECK(head ==
        "HTTP/1.1 200 OK\r\n"
        "Content-Type: text/plain\r\n"
        "X-RateLimit-Limit: 50\r\n"
        "X-Request-Id: rid\r\n"
        "Cache-Control: no-store\r\n"
        "X-Served-By: orders rid https\r\n"
        "Content-Length: 5\r\n"
        "\r\n");
}

TEST_CASE("local replies carry a status and a small JSON body", "[local_reply]") {
  auto r = make_local_reply(404, "no route matches", "rid-1");
  CHECK(r.status == 404);
  CHECK(r.content_type == "application/json");
  CHECK(r.body ==
        "{\"error\":\"Not Found\",\"message\":\"no route matches\",\"request_id\":\"rid-1\","
        "\"status\":404}\n");
  CHECK(reason_for(431) == "Request Header Fields Too Large");
  CHECK(reason_for(413) == "Content Too Large");
  auto escaped = make_local_reply(400, "bad \"quote\"", "x");
  CHECK(escaped.body.find("bad \\\"quote\\\"") != std::string::npos);
}

TEST_CASE("WebSocket upgrade: asked, granted, forwarded, answered", "[proxy_headers]") {
  sluice::HttpFields asked;
  asked.set("Connection", "keep-alive");
  asked.insert("Connection", "UPGRADE");
  asked.set("Upgrade", "foo/2, websocket");
  CHECK(asks_websocket_upgrade(asked));
  asked.set("Upgrade", "websocketx");
  CHECK_FALSE(asks_websocket_upgrade(asked));

  sluice::HttpFields granted;
  granted.set("Upgrade", "WebSocket");
  granted.set("Connection", "Upgrade");
  granted.set("Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  CHECK(grants_websocket_upgrade(granted));
  sluice::HttpFields other;
  other.set("Upgrade", "h2c");
  CHECK_FALSE(grants_websocket_upgrade(other));

  sluice::HttpFields stripped;  // the handshake's fields after strip_hop_by_hop
  stripped.set("Host", "chat.example");
  stripped.set("Sec-WebSocket-Key", "k");
  ForwardedInfo info{"127.0.0.1", "https", "chat.example", "rid"};
  info.websocket = true;
  std::string head;
  serialize_request_head(head, "GET", "/chat", stripped, info, false);
  CHECK(head.ends_with("Via: 1.1 sluice\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"));

  ResponseHeadOptions options;
  options.request_id = "rid";
  options.websocket = true;
  serialize_response_head(head, 101, "Switching Protocols", granted, options);
  CHECK(head ==
        "HTTP/1.1 101 Switching Protocols\r\n"
        "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
        "X-Request-Id: rid\r\n"
        "Connection: Upgrade\r\n"
        "Upgrade: websocket\r\n"
        "\r\n");
}

TEST_CASE("a route that reads response bodies asks only for codings it decodes",
          "[proxy_headers]") {
  const auto decodable = [](std::string_view value) {
    std::string out;
    append_decodable_codings(out, value);
    return out;
  };
  CHECK(decodable("gzip, deflate, br") == "gzip, deflate");
  CHECK(decodable("br;q=1.0, gzip;q=0.5, *;q=0.1") == "gzip;q=0.5");
  CHECK(decodable("br, zstd") == "identity");
  CHECK(decodable("") == "identity");
  CHECK(decodable(" X-GZIP , identity;q=0 ") == "X-GZIP, identity;q=0");
  CHECK(decodable("br, identity;q=0") == "identity");

  sluice::HttpFields f;
  f.set("Host", "api");
  f.insert("Accept-Encoding", "br, gzip");
  f.insert("Accept-Encoding", "zstd");
  ForwardedInfo info{"10.0.0.1", "http", "api", "rid"};
  info.decodable_codings_only = true;
  std::string out;
  serialize_request_head(out, "POST", "/v1/chat/completions", f, info, false, 2);
  CHECK(out.find("Accept-Encoding: gzip\r\n") != std::string::npos);
  CHECK(out.find("br") == std::string::npos);
  // Without the flag, as the client sent it.
  info.decodable_codings_only = false;
  out.clear();
  serialize_request_head(out, "POST", "/v1/chat/completions", f, info, false, 2);
  CHECK(out.find("Accept-Encoding: br, gzip\r\n") != std::string::npos);
  // No Accept-Encoding at all: identity, so that nothing comes encoded.
  sluice::HttpFields bare;
  bare.set("Host", "api");
  info.decodable_codings_only = true;
  out.clear();
  serialize_request_head(out, "GET", "/", bare, info, false, std::nullopt);
  CHECK(out.find("Accept-Encoding: identity\r\n") != std::string::npos);
}
