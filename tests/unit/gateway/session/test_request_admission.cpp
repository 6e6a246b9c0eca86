// Request admission: framing and Host rules, the target rewrite, hop-by-hop
// and underscore headers, request id, client IP and scheme, and the route.
#include <catch2/catch.hpp>

#include <string>

#include "gateway/config/load.hpp"
#include "gateway/session/request_admission.hpp"

namespace http = boost::beast::http;
using namespace sluice;

namespace {

std::shared_ptr<const Config> make_config(const std::string& server = "{}") {
  const auto result = parse_config(R"(
server: )" + server + R"(
upstreams:
  app: { servers: ["127.0.0.1:9000"] }
routes:
  - { name: api, match: { path_prefix: "/api", methods: [GET, POST] }, upstream: app }
)",
                                   "admission.yaml");
  INFO((result.errors.empty() ? std::string() : result.errors.front()));
  REQUIRE(result.config);
  return result.config;
}

ClientRequest request(http::verb method, std::string_view target, int version = 11) {
  ClientRequest req{method, target, version};
  if (version == 11) req.set(http::field::host, "example.com");
  return req;
}

struct Admission {
  std::shared_ptr<const Config> config = make_config();
  IpAddress peer = *parse_ip("10.0.0.1");
  BodyFacts body{false, true};
  bool over_tls = false;
  RequestInfo info;

  std::optional<LocalReply> admit(ClientRequest& req) {
    return admit_request(req, body, peer, over_tls, *config, info);
  }
  // The status and message of a refusal, as "400 message"; "ok" when admitted.
  std::string verdict(ClientRequest req) {
    auto reply = admit(req);
    if (!reply) return "ok";
    const auto key = std::string{"\"message\":\""};
    const auto at = reply->body.find(key);
    REQUIRE(at != std::string::npos);
    const auto end = reply->body.find('"', at + key.size());
    return std::to_string(reply->status) + " " +
           reply->body.substr(at + key.size(), end - at - key.size());
  }
};

}  // namespace

TEST_CASE("framing rules against request smuggling", "[admission]") {
  Admission a;
  auto req = request(http::verb::post, "/api/x");
  req.set(http::field::content_length, "3");
  req.set(http::field::transfer_encoding, "chunked");
  CHECK(a.verdict(req) == "400 both Content-Length and Transfer-Encoding");

  req = request(http::verb::post, "/api/x");
  req.set(http::field::transfer_encoding, "chunked");
  req.insert(http::field::transfer_encoding, "chunked");
  CHECK(a.verdict(req) == "400 more than one Transfer-Encoding header");

  req.set(http::field::transfer_encoding, "chunked, chunked");
  CHECK(a.verdict(req) == "400 chunked must be the only transfer coding");
  req.set(http::field::transfer_encoding, "chunked, gzip");
  CHECK(a.verdict(req) == "400 chunked must be the only transfer coding");
  req.set(http::field::transfer_encoding, "gzip, chunked");
  CHECK(a.verdict(req) == "501 transfer coding not supported");
  req.set(http::field::transfer_encoding, "chunked");
  CHECK(a.verdict(req) == "ok");

  auto old = request(http::verb::post, "/api/x", 10);
  old.set(http::field::transfer_encoding, "chunked");
  CHECK(a.verdict(old) == "400 Transfer-Encoding in an HTTP/1.0 request");
}

TEST_CASE("Host rules", "[admission]") {
  Admission a;
  auto req = request(http::verb::get, "/api/x");
  req.erase(http::field::host);
  CHECK(a.verdict(req) == "400 missing Host header");
  CHECK(a.verdict(request(http::verb::get, "/api/x", 10)) == "ok");  // HTTP/1.0 needs none
  req.set(http::field::host, "a");
  req.insert(http::field::host, "b");
  CHECK(a.verdict(req) == "400 more than one Host header");
  req = request(http::verb::get, "/api/x");
  req.set(http::field::host, "user@h");
  CHECK(a.verdict(req).starts_with("400 "));
}

TEST_CASE("a refusal closes the connection and carries a new request id", "[admission]") {
  Admission a;
  auto req = request(http::verb::get, "/api/x");
  req.erase(http::field::host);
  req.set("X-Request-Id", "mine");
  auto reply = a.admit(req);
  REQUIRE(reply);
  CHECK(reply->close_connection);
  CHECK(a.info.request_id.size() == 32);
  CHECK(reply->body.find(a.info.request_id) != std::string::npos);
}

TEST_CASE("the asterisk form is for OPTIONS only", "[admission]") {
  Admission a;
  auto get = request(http::verb::get, "*");
  auto reply = a.admit(get);
  REQUIRE(reply);
  CHECK(reply->status == 400);
  CHECK(reply->body.find("target with a method other than OPTIONS") != std::string::npos);
  CHECK(a.verdict(request(http::verb::options, "*")).starts_with("404 "));  // no route for "*"
}

TEST_CASE("absolute form: the authority replaces Host, the target is normalized", "[admission]") {
  Admission a;
  auto req = request(http::verb::get, "http://Other.example:8080/api//x?q=1");
  auto reply = a.admit(req);
  CHECK_FALSE(reply);
  CHECK(req[http::field::host] == "Other.example:8080");
  CHECK(req.target() == "/api/x?q=1");
  CHECK(a.info.target.target == "/api/x?q=1");
  CHECK(a.info.original_target == "http://Other.example:8080/api//x?q=1");
  CHECK(a.verdict(request(http::verb::get, "ftp://h/api")).starts_with("400 "));
}

TEST_CASE("the target is normalized; the route path drops parameters", "[admission]") {
  Admission a;
  auto req = request(http::verb::get, "/api//v%31;p=1/x");
  CHECK_FALSE(a.admit(req));
  CHECK(req.target() == "/api/v1;p=1/x");
  CHECK(a.info.target.route_path == "/api/v1/x");
  CHECK(a.info.original_target == "/api//v%31;p=1/x");
  CHECK(a.info.route->name == "api");

  auto plain = request(http::verb::get, "/api/y");
  CHECK_FALSE(a.admit(plain));
  CHECK(a.info.original_target.empty());  // unchanged: nothing to remember

  CHECK(a.verdict(request(http::verb::get, "/api/../admin")).starts_with("400 "));
  CHECK(a.verdict(request(http::verb::get, "/api/%2e%2e/admin")).starts_with("400 "));
}

TEST_CASE("hop-by-hop headers go before the request id is read", "[admission]") {
  Admission a;
  auto req = request(http::verb::get, "/api/x");
  req.set(http::field::connection, "X-Request-Id");
  req.set("X-Request-Id", "hidden");
  CHECK_FALSE(a.admit(req));
  CHECK(req.count(http::field::connection) == 0);
  CHECK(a.info.request_id != "hidden");
  CHECK(a.info.request_id.size() == 32);

  auto kept = request(http::verb::get, "/api/x");
  kept.set("X-Request-Id", "abc-123");
  CHECK_FALSE(a.admit(kept));
  CHECK(a.info.request_id == "abc-123");
}

TEST_CASE("header names with underscores, as configured", "[admission]") {
  auto req = request(http::verb::get, "/api/x");
  req.set("X_API_Key", "k");
  Admission drop;
  auto dropped = req;
  CHECK(drop.verdict(dropped) == "ok");
  CHECK_FALSE(drop.admit(dropped));
  CHECK(dropped.count("X_API_Key") == 0);

  Admission allow;
  allow.config = make_config("{ headers_with_underscores: allow }");
  auto allowed = req;
  CHECK_FALSE(allow.admit(allowed));
  CHECK(allowed.count("X_API_Key") == 1);

  Admission reject;
  reject.config = make_config("{ headers_with_underscores: reject }");
  CHECK(reject.verdict(req) == "400 header name with an underscore");
}

TEST_CASE("client IP and forwarded scheme trust only trusted proxies", "[admission]") {
  Admission a;
  a.config = make_config("{ trusted_proxies: [\"10.0.0.0/8\"] }");
  auto req = request(http::verb::get, "/api/x");
  req.set("X-Forwarded-For", "203.0.113.7, 10.2.2.2");
  req.set("X-Forwarded-Proto", "HTTPS");
  CHECK_FALSE(a.admit(req));
  CHECK(a.info.client_ip.to_string() == "203.0.113.7");
  CHECK(a.info.forwarded_proto == "https");

  a.peer = *parse_ip("192.0.2.9");
  auto untrusted = request(http::verb::get, "/api/x");
  untrusted.set("X-Forwarded-For", "203.0.113.7");
  untrusted.set("X-Forwarded-Proto", "https");
  CHECK_FALSE(a.admit(untrusted));
  CHECK(a.info.client_ip.to_string() == "192.0.2.9");
  CHECK(a.info.forwarded_proto == "http");

  // On a TLS connection the scheme is https, whoever the peer is and whatever it says.
  a.over_tls = true;
  auto over_tls = request(http::verb::get, "/api/x");
  over_tls.set("X-Forwarded-Proto", "http");
  CHECK_FALSE(a.admit(over_tls));
  CHECK(a.info.forwarded_proto == "https");
}

TEST_CASE("routing: 404 and 405 close only when the body is unread", "[admission]") {
  Admission a;
  auto get = request(http::verb::get, "/nope");
  auto reply = a.admit(get);
  REQUIRE(reply);
  CHECK(reply->status == 404);
  CHECK_FALSE(reply->close_connection);

  a.body = {false, false};
  auto put = request(http::verb::put, "/api/x");
  reply = a.admit(put);
  REQUIRE(reply);
  CHECK(reply->status == 405);
  CHECK(reply->close_connection);
  REQUIRE(reply->headers.size() == 1);
  CHECK(reply->headers[0].first == "Allow");
  CHECK(reply->headers[0].second.find("GET") != std::string::npos);
}

TEST_CASE("keep-alive and body facts of an admitted request", "[admission]") {
  Admission a;
  a.body = {true, false};
  auto req = request(http::verb::post, "/api/x");
  req.set(http::field::transfer_encoding, "chunked");
  CHECK_FALSE(a.admit(req));
  CHECK(a.info.keep_alive);
  CHECK(a.info.body.chunked);
  CHECK_FALSE(a.info.body.done);

  a.body = {false, true};
  auto old = request(http::verb::get, "/api/x", 10);
  CHECK_FALSE(a.admit(old));
  CHECK_FALSE(a.info.keep_alive);
  auto old_keep = request(http::verb::get, "/api/x", 10);
  old_keep.set(http::field::connection, "keep-alive");
  CHECK_FALSE(a.admit(old_keep));
  CHECK(a.info.keep_alive);
}

TEST_CASE("a WebSocket handshake is told apart; its Upgrade is stripped like any other",
          "[admission]") {
  Admission a;
  auto handshake = [](std::string_view connection, std::string_view upgrade) {
    auto req = request(http::verb::get, "/api/chat");
    req.set(http::field::connection, connection);
    req.set(http::field::upgrade, upgrade);
    req.set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==");
    return req;
  };
  auto ws = handshake("keep-alive, Upgrade", "WebSocket");
  CHECK_FALSE(a.admit(ws));
  CHECK(a.info.websocket);
  CHECK(ws.count(http::field::upgrade) == 0);  // the forwarder writes its own
  CHECK(ws.count(http::field::connection) == 0);
  CHECK(ws["Sec-WebSocket-Key"] == "dGhlIHNhbXBsZSBub25jZQ==");

  auto h2c = handshake("Upgrade, HTTP2-Settings", "h2c");
  CHECK_FALSE(a.admit(h2c));
  CHECK_FALSE(a.info.websocket);

  auto unlisted = handshake("keep-alive", "websocket");  // Connection does not list upgrade
  CHECK_FALSE(a.admit(unlisted));
  CHECK_FALSE(a.info.websocket);

  auto post = handshake("Upgrade", "websocket");
  post.method(http::verb::post);
  CHECK_FALSE(a.admit(post));
  CHECK_FALSE(a.info.websocket);

  auto old = handshake("Upgrade", "websocket");
  old.version(10);
  CHECK_FALSE(a.admit(old));
  CHECK_FALSE(a.info.websocket);

  a.body = {false, false};  // a handshake has no body
  auto with_body = handshake("Upgrade", "websocket");
  CHECK_FALSE(a.admit(with_body));
  CHECK_FALSE(a.info.websocket);
}
