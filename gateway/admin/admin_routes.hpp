// The admin endpoints: which handler answers a method and a path. Pure
// dispatch with no I/O; a handler answers through its reply callback, at once
// or later, on the admin listener's thread (the main thread). Endpoints are
// added before the Application starts; other libraries add theirs the same way.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <system_error>
#include <variant>

#include <boost/asio/any_io_executor.hpp>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/verb.hpp>
#include <nlohmann/json.hpp>

namespace sluice {

struct Config;

using AdminRequest = boost::beast::http::request<boost::beast::http::string_body>;
using AdminResponse = boost::beast::http::response<boost::beast::http::string_body>;
// Called once, from any thread (the admin server writes the answer on its own
// thread). Calling it releases its hold on the admin session: a handler that
// answers from another thread must not keep copies of it past the call.
using AdminReply = std::function<void(AdminResponse)>;
// A request as an endpoint sees it: the message and who sent it. Both live
// until the reply is called; a handler that needs them later copies them.
struct AdminCall {
  const AdminRequest& request;
  std::string_view peer;        // the client's address, for the log of what it changed
  std::string_view local = {};  // the address the connection arrived on
  // The configuration in force when the request came (set by the routes).
  std::shared_ptr<const Config> config = nullptr;
};
using AdminHandler = std::function<void(const AdminCall&, AdminReply)>;

// The body of a request to a streaming endpoint, read piece by piece instead
// of whole (an import of any size holds one piece at a time). Called on the
// admin listener's thread only.
class AdminBodyReader {
 public:
  // `piece` holds the next bytes (at most 64 KiB); `done` once the whole body
  // was read; an error when the connection failed or the framing is bad
  // (the request then ends without an answer).
  using Piece = std::function<void(std::error_code ec, std::string piece, bool done)>;
  virtual ~AdminBodyReader() = default;
  // Reads the next piece; call again only once `piece` was called.
  virtual void read(Piece piece) = 0;
  // The admin listener's executor, where read() must be called.
  virtual boost::asio::any_io_executor executor() const = 0;
};
// The call's request holds the head only (its body is empty).
using AdminStreamHandler =
    std::function<void(const AdminCall&, std::shared_ptr<AdminBodyReader>, AdminReply)>;

// Who may call the protected endpoints (the rule is in admin_access.hpp).
struct AdminAccess {
  std::string token;               // admin.token; empty = none configured
  bool loopback_listener = true;   // the admin listener is bound to a loopback address
  std::vector<std::string> hosts;  // admin.hosts: names a Host header may give (admin_access.hpp)
};

// How an endpoint's path is matched against a request's (without the query).
enum class AdminMatch {
  kExact,   // the whole path
  kPrefix,  // the path starts with it and is longer (the rest names a resource)
};
// Who may call an endpoint: anyone who reaches the listener, or only those
// admin_access.hpp lets through (endpoints that read or change state).
enum class AdminGuard { kOpen, kProtected };

// An admin response: Server, Content-Type and Cache-Control: no-store set.
AdminResponse admin_response(boost::beast::http::status status, std::string content_type,
                             std::string body);
// An application/json admin response: `document` on one line, then a newline.
AdminResponse json_response(boost::beast::http::status status,
                            const nlohmann::ordered_json& document);
// An application/problem+json admin response: type about:blank, the status'
// reason phrase as title, `detail`, and with a `field` also that field (the
// detail then names it first).
AdminResponse problem_response(unsigned status, std::string_view detail,
                               std::string_view field = {});

class AdminRoutes {
 public:
  // `path` is matched as `match` says, without the query; an exact match
  // wins over a prefix, and a longer prefix over a shorter one. A HEAD
  // request is answered by the server as the GET would be, without the body.
  // A protected endpoint answers only requests that the access in force
  // (set_access) lets through, whatever their method, and that a browser
  // could not have sent across sites (admin_access.hpp); `body_type` is the
  // Content-Type its POST, PUT and PATCH requests must carry (empty: any).
  void add(std::string path, AdminHandler handler,
           std::initializer_list<boost::beast::http::verb> methods =
               {boost::beast::http::verb::get, boost::beast::http::verb::head},
           AdminMatch match = AdminMatch::kExact, AdminGuard guard = AdminGuard::kOpen,
           std::string body_type = {});

  // An endpoint whose body is read piece by piece (exact path, POST only),
  // with no size limit: the handler bounds what it keeps.
  void add_streaming(std::string path, std::string body_type, AdminStreamHandler handler,
                     AdminGuard guard = AdminGuard::kProtected);
  // Whether a request with this head goes to a streaming endpoint (the
  // server then reads its head only, and hands the body over as it comes).
  bool streams(const AdminRequest& head) const;
  void dispatch_stream(const AdminCall& head, std::shared_ptr<AdminBodyReader> body,
                       AdminReply reply) const;

  // Who may call the protected endpoints from now on (main thread).
  void set_access(const AdminAccess& access);
  // The configuration in force from now on, handed to handlers in their call.
  void set_config(std::shared_ptr<const Config> config) { config_ = std::move(config); }

  // The refusal of a request by its head alone (404, 405, 401, 403, 415), or
  // nullopt: asked before any byte of its body is read.
  std::optional<AdminResponse> refuse(const AdminCall& head) const;

  // A known path with a method it does not take gets 405 with its Allow; an
  // unknown path gets 404 for GET and HEAD and 405 (Allow: GET, HEAD) for the rest.
  void dispatch(const AdminCall& call, AdminReply reply) const;

 private:
  struct Endpoint {
    std::string path;
    std::vector<boost::beast::http::verb> methods;
    AdminHandler handler;
    AdminMatch match;
    AdminGuard guard;
    AdminStreamHandler stream_handler;  // set for a streaming endpoint
    std::string body_type;              // empty: any
  };
  const Endpoint* find(std::string_view path) const;
  // The endpoint that takes `call`, or its refusal (404, 405, 401, 403, 415).
  std::variant<const Endpoint*, AdminResponse> admit(const AdminCall& call) const;

  std::vector<Endpoint> endpoints_;
  AdminAccess access_;
  std::shared_ptr<const Config> config_;
};

}  // namespace sluice
