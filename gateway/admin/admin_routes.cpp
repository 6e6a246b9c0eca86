#include "gateway/admin/admin_routes.hpp"

#include <algorithm>
#include <utility>

#include "gateway/admin/admin_access.hpp"
#include "gateway/common/target_parts.hpp"

namespace sluice {
namespace {

namespace http = boost::beast::http;

// 405 naming the methods that are taken.
AdminResponse method_not_allowed(const std::vector<http::verb>& allowed) {
  auto res = json_response(http::status::method_not_allowed, {{"error", "method not allowed"}});
  std::string allow;
  for (const auto method : allowed) {
    if (!allow.empty()) allow += ", ";
    allow += http::to_string(method);
  }
  res.set(http::field::allow, allow);
  return res;
}

bool is_read(http::verb method) {
  return method == http::verb::get || method == http::verb::head;
}

}  // namespace

AdminResponse admin_response(http::status status, std::string content_type, std::string body) {
  AdminResponse res{status, 11};
  res.set(http::field::server, "sluice");
  res.set(http::field::content_type, content_type);
  res.set(http::field::cache_control, "no-store");
  res.body() = std::move(body);
  return res;
}

AdminResponse json_response(http::status status, const nlohmann::ordered_json& document) {
  return admin_response(status, "application/json", document.dump() + "\n");
}

void AdminRoutes::add(std::string path, AdminHandler handler,
                      std::initializer_list<http::verb> methods, AdminMatch match,
                      AdminGuard guard) {
  endpoints_.push_back({std::move(path), methods, std::move(handler), match, guard});
}

void AdminRoutes::set_access(const AdminAccess& access) {
  access_ = access;
}

const AdminRoutes::Endpoint* AdminRoutes::find(std::string_view path) const {
  const Endpoint* best = nullptr;
  for (const auto& e : endpoints_) {
    if (e.match == AdminMatch::kExact) {
      if (e.path == path) return &e;
    } else if (path.size() > e.path.size() && path.starts_with(e.path) &&
               (!best || e.path.size() > best->path.size())) {
      best = &e;
    }
  }
  return best;
}

void AdminRoutes::dispatch(const AdminRequest& request, AdminReply reply) const {
  const std::string_view target = request.target();
  const auto* endpoint = find(split_target(target).path);
  const auto method = request.method();
  if (!endpoint) {
    if (!is_read(method)) return reply(method_not_allowed({http::verb::get, http::verb::head}));
    return reply(json_response(http::status::not_found, {{"error", "not found"}}));
  }
  if (endpoint->guard == AdminGuard::kProtected) {
    if (auto refusal = refuse_admin_request(request, access_)) return reply(std::move(*refusal));
  }
  const auto& methods = endpoint->methods;
  if (std::find(methods.begin(), methods.end(), method) == methods.end()) {
    return reply(method_not_allowed(methods));
  }
  endpoint->handler(request, std::move(reply));
}

}  // namespace sluice
