// The admin endpoints: which handler answers a method and a path. Pure
// dispatch with no I/O; a handler answers through its reply callback, at once
// or later, on the admin listener's thread (the main thread). Endpoints are
// added before the Application starts; other libraries add theirs the same way.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/verb.hpp>
#include <nlohmann/json.hpp>

namespace sluice {

using AdminRequest = boost::beast::http::request<boost::beast::http::string_body>;
using AdminResponse = boost::beast::http::response<boost::beast::http::string_body>;
using AdminReply = std::function<void(AdminResponse)>;
using AdminHandler = std::function<void(const AdminRequest&, AdminReply)>;

// An admin response: Server, Content-Type and Cache-Control: no-store set.
AdminResponse admin_response(boost::beast::http::status status, std::string content_type,
                             std::string body);
// An application/json admin response: `document` on one line, then a newline.
AdminResponse json_response(boost::beast::http::status status,
                            const nlohmann::ordered_json& document);

class AdminRoutes {
 public:
  // `path` is matched exactly, without the query. A HEAD request is answered
  // by the server as the GET would be, without the body.
  void add(std::string path, AdminHandler handler,
           std::initializer_list<boost::beast::http::verb> methods = {
               boost::beast::http::verb::get, boost::beast::http::verb::head});

  // A known path with a method it does not take gets 405 with its Allow; an
  // unknown path gets 404 for GET and HEAD and 405 (Allow: GET, HEAD) for the rest.
  void dispatch(const AdminRequest& request, AdminReply reply) const;

 private:
  struct Endpoint {
    std::string path;
    std::vector<boost::beast::http::verb> methods;
    AdminHandler handler;
  };
  const Endpoint* find(std::string_view path) const;

  std::vector<Endpoint> endpoints_;
};

}  // namespace sluice
