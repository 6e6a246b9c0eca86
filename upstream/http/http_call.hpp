// One HTTP/1.1 request to a URL, over HTTP or HTTPS (the upstream TLS client,
// the URL's host verified), from resolve to the parsed answer: bounded in time
// (the whole call) and in size (head and body), on one connection closed after
// it. For what Sluice itself asks of another server (a JWKS document, a batch
// of spans), never for a client's request.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

namespace sluice {

class UpstreamTls;

struct HttpUrl {
  std::string text;  // as configured
  bool tls = true;
  std::string host;  // an IPv6 address without its brackets
  std::uint16_t port = 443;
  std::string target = "/";  // path and query
};

// "https://host[:port]/path[?query]" or http://; nullopt with `error` set.
std::optional<HttpUrl> parse_http_url(std::string_view text, std::string& error);

struct HttpCallSpec {
  std::string method = "GET";
  HttpUrl url;
  std::shared_ptr<const UpstreamTls> tls;  // required for https
  std::string user_agent = "sluice";
  // Sent besides Host, User-Agent, Connection and Content-Length.
  std::vector<std::pair<std::string, std::string>> headers;
  // Sent with its Content-Length when not empty, or not a GET; `shared_body`,
  // when set, in its place (a body the caller keeps for another try).
  std::string body;
  std::shared_ptr<const std::string> shared_body;
  std::chrono::milliseconds timeout{5000};
  std::size_t max_body = 1u << 20;
};

struct HttpCallResult {
  std::string error;  // empty: the server answered (any status)
  unsigned status = 0;
  std::string body;
  std::optional<std::string> retry_after;  // the Retry-After header's value, when sent
};

class HttpCall {
 public:
  using Done = std::function<void(HttpCallResult)>;
  virtual ~HttpCall() = default;
  // Ends the call now: `done` is called at once with error "stopped".
  virtual void cancel() = 0;
};

// Starts the call; `done` is called once, on `executor`.
std::shared_ptr<HttpCall> start_http_call(boost::asio::io_context::executor_type executor,
                                          HttpCallSpec spec, HttpCall::Done done);

}  // namespace sluice
