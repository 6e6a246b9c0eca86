// The request head prepared once (proxy_headers.hpp's rule) and written for
// either upstream protocol (request_head.hpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include <boost/beast/http/fields.hpp>

#include "common/spares.hpp"
#include "upstream/h2/h2_header_block.hpp"
#include "upstream/proxy_headers.hpp"
#include "upstream/request_head.hpp"

using namespace sluice;
namespace http = boost::beast::http;

namespace {

std::string field(const H2HeaderBlock& fields, std::string_view name) {
  for (const auto& [n, v] : fields) {
    if (n == name) return std::string(v);
  }
  return "<absent>";
}

UpstreamHead head_of(std::string_view method, std::string_view target,
                     std::vector<UpstreamHead::Field> fields) {
  UpstreamHead head;
  head.method = method;
  head.target = target;
  head.fields = std::move(fields);
  for (const auto& [name, value] : head.fields) {
    head.has_host = head.has_host || name == "Host";
  }
  head.host_at = head.fields.size();
  return head;
}

}  // namespace

TEST_CASE("A head becomes HTTP/2 fields, pseudo-headers first", "[request_head]") {
  auto head = head_of("POST", "/pkg.Svc/Get?x=1",
                      {{"Host", "api.example"},
                       {"Content-Type", "application/json"},
                       {"X-Forwarded-For", "10.0.0.1"}});
  head.content_length = 5;
  H2HeaderBlock fields;
  write_h2_head(fields, head, "http", "upstream:80");
  REQUIRE(fields.size() == 7);
  CHECK(fields[0] == H2HeaderBlock::Field{":method", "POST"});
  CHECK(fields[1] == H2HeaderBlock::Field{":scheme", "http"});
  CHECK(fields[2] == H2HeaderBlock::Field{":authority", "api.example"});
  CHECK(fields[3] == H2HeaderBlock::Field{":path", "/pkg.Svc/Get?x=1"});
  CHECK(field(fields, "content-type") == "application/json");
  CHECK(field(fields, "x-forwarded-for") == "10.0.0.1");
  CHECK(field(fields, "content-length") == "5");
  CHECK(field(fields, "host") == "<absent>");
}

TEST_CASE("Connection-specific fields are not sent over HTTP/2", "[request_head]") {
  auto head = head_of("GET", "/",
                      {{"Host", "a"},
                       {"Connection", "Upgrade"},
                       {"Keep-Alive", "timeout=5"},
                       {"Proxy-Connection", "keep-alive"},
                       {"Upgrade", "websocket"},
                       {"TE", "gzip"},
                       {"X-Kept", "yes"}});
  head.chunked = true;
  H2HeaderBlock fields;
  write_h2_head(fields, head, "https", "");
  CHECK(fields.size() == 5);
  CHECK(field(fields, ":scheme") == "https");
  CHECK(field(fields, "x-kept") == "yes");
  CHECK(field(fields, "te") == "<absent>");
  CHECK(field(fields, "transfer-encoding") == "<absent>");
  CHECK(field(fields, "content-length") == "<absent>");
}

TEST_CASE("A gRPC request carries te: trailers to an HTTP/2 upstream, once", "[request_head]") {
  H2HeaderBlock fields;
  write_h2_head(fields,
                head_of("POST", "/a/B", {{"Host", "h"}, {"Content-Type", "application/grpc+proto"}}),
                "http", "");
  CHECK(field(fields, "te") == "trailers");
  write_h2_head(fields,
                head_of("POST", "/a/B",
                        {{"Host", "h"}, {"TE", "trailers"}, {"Content-Type", "application/grpc"}}),
                "http", "");
  CHECK(std::count_if(fields.begin(), fields.end(),
                      [](const auto& f) { return f.first == "te"; }) == 1);
  write_h2_head(fields, head_of("GET", "/", {{"Host", "h"}}), "http", "");
  CHECK(field(fields, "te") == "<absent>");
}

TEST_CASE("A request without Host names the upstream server, in either protocol",
          "[request_head]") {
  auto head = head_of("GET", "/old", {{"Accept", "*/*"}, {"X-Request-Id", "r1"}});
  head.host_at = 1;  // where the client's fields end
  std::string text;
  write_http1_head(text, head, "10.0.0.2:8080");
  CHECK(text ==
        "GET /old HTTP/1.1\r\nAccept: */*\r\nHost: 10.0.0.2:8080\r\nX-Request-Id: r1\r\n\r\n");
  H2HeaderBlock fields;
  write_h2_head(fields, head, "http", "10.0.0.2:8080");
  CHECK(field(fields, ":authority") == "10.0.0.2:8080");
}

TEST_CASE("One prepared head: the same fields in HTTP/1.1 text and in HTTP/2 fields",
          "[request_head]") {
  sluice::HttpFields f;
  f.insert(http::field::host, "api.example");
  f.insert("X-Forwarded-For", "203.0.113.7");
  f.insert(http::field::via, "1.0 edge");
  f.insert(http::field::expect, "100-continue");
  f.insert(http::field::content_length, "11");
  f.insert("X-Cost", "9");
  f.insert(http::field::user_agent, "k6");
  HeaderRules rules;
  HeaderTemplate value;
  REQUIRE(value.parse("${route}").empty());
  rules.add_set("X-Route", std::move(value));
  ForwardedInfo info{"10.0.0.1", "https", "api.example", "rid-1"};
  info.drop_headers = {"X-Cost", ""};
  info.rules = &rules;
  info.vars.route = "orders";
  info.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  UpstreamHead head;
  prepare_request_head(head, "POST", "/orders", f, info, false, 11);

  std::string text;
  write_http1_head(text, head, "unused:1");
  CHECK(text ==
        "POST /orders HTTP/1.1\r\n"
        "Host: api.example\r\n"
        "User-Agent: k6\r\n"
        "X-Forwarded-For: 203.0.113.7, 10.0.0.1\r\n"
        "X-Forwarded-Proto: https\r\n"
        "X-Forwarded-Host: api.example\r\n"
        "X-Request-Id: rid-1\r\n"
        "Via: 1.0 edge, 1.1 sluice\r\n"
        "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n"
        "X-Route: orders\r\n"
        "Content-Length: 11\r\n"
        "\r\n");
  std::string once;
  serialize_request_head(once, "POST", "/orders", f, info, false, 11);
  CHECK(once == text);

  H2HeaderBlock fields;
  write_h2_head(fields, head, "https", "unused:1");
  CHECK(fields == H2HeaderBlock{{":method", "POST"},
                           {":scheme", "https"},
                           {":authority", "api.example"},
                           {":path", "/orders"},
                           {"user-agent", "k6"},
                           {"x-forwarded-for", "203.0.113.7, 10.0.0.1"},
                           {"x-forwarded-proto", "https"},
                           {"x-forwarded-host", "api.example"},
                           {"x-request-id", "rid-1"},
                           {"via", "1.0 edge, 1.1 sluice"},
                           {"traceparent",
                            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
                           {"x-route", "orders"},
                           {"content-length", "11"}});

  // Prepared again for the next request on the connection: nothing of the
  // first is left.
  sluice::HttpFields g;
  g.insert(http::field::host, "b");
  prepare_request_head(head, "GET", "/", g, ForwardedInfo{"10.0.0.9", "http", "b", "rid-2"}, false);
  write_http1_head(text, head, "");
  CHECK(text ==
        "GET / HTTP/1.1\r\nHost: b\r\nX-Forwarded-For: 10.0.0.9\r\nX-Forwarded-Proto: http\r\n"
        "X-Forwarded-Host: b\r\nX-Request-Id: rid-2\r\nVia: 1.1 sluice\r\n\r\n");
}

TEST_CASE("HTTP/1.1 text: a chunked body, Host after every field, a head shorter than the last",
          "[request_head]") {
  const std::string long_value(300, 'x');
  auto head = head_of("PUT", "/a?b=c", {{"Accept", "*/*"}, {"X-Long", long_value}});
  head.host_at = 2;  // after the last field
  head.chunked = true;
  head.content_length = 5;  // chunked wins: no Content-Length
  std::string text;
  write_http1_head(text, head, "up:81");
  CHECK(text == "PUT /a?b=c HTTP/1.1\r\nAccept: */*\r\nX-Long: " + long_value +
                    "\r\nHost: up:81\r\nTransfer-Encoding: chunked\r\n\r\n");
  // The same string for a shorter head: sized to it, nothing of the last left.
  auto second = head_of("GET", "/", {{"Host", "h"}});
  second.content_length = 0;
  write_http1_head(text, second, "up:81");
  CHECK(text == "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n");
  // Host's place past the fields it indexes: no Host added (and no byte
  // counted for one).
  auto third = head_of("GET", "/", {});
  third.host_at = 5;
  write_http1_head(text, third, "up:81");
  CHECK(text == "GET / HTTP/1.1\r\n\r\n");
}

TEST_CASE("An ended head's field list and target go to the next head, with their capacity",
          "[request_head]") {
  using FieldSpares = Spares<std::vector<UpstreamHead::Field>>;
  if (!FieldSpares::kKeeps) return;  // nothing is kept under AddressSanitizer
  const std::string target = "/a.service.With/ALongMethodName?and=a-query";
  std::size_t fields_capacity = 0;
  {
    UpstreamHead stream_head;  // an HTTP/2 stream's: one request only
    stream_head.take_spares(target.size());
    for (int i = 0; i < 20; ++i) stream_head.fields.emplace_back("x-field", "value");
    stream_head.target_text.assign(target);
    fields_capacity = stream_head.fields.capacity();
  }
  UpstreamHead next;
  next.take_spares(target.size());
  CHECK(next.fields.empty());
  CHECK(next.fields.capacity() == fields_capacity);  // no allocation for its fields
  CHECK(next.target_text.empty());
  CHECK(next.target_text.capacity() >= target.size());
}
