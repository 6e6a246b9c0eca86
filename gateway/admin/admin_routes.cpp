#include "gateway/admin/admin_routes.hpp"

#include <algorithm>
#include <utility>

#include "common/target_parts.hpp"
#include "gateway/admin/admin_access.hpp"
#include "gateway/session/local_reply.hpp"

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

AdminResponse problem_response(unsigned status, std::string_view detail, std::string_view field) {
  nlohmann::ordered_json doc = {
      {"type", "about:blank"},
      {"title", reason_for(status)},
      {"status", status},
      {"detail",
       field.empty() ? std::string(detail) : std::string(field) + ": " + std::string(detail)}};
  if (!field.empty()) doc["field"] = field;
  return admin_response(static_cast<http::status>(status), "application/problem+json",
                        doc.dump() + "\n");
}

void AdminRoutes::add(std::string path, AdminHandler handler,
                      std::initializer_list<http::verb> methods, AdminMatch match, AdminGuard guard,
                      std::string body_type) {
  endpoints_.push_back(
      {std::move(path), methods, std::move(handler), match, guard, {}, std::move(body_type)});
}

void AdminRoutes::add_streaming(std::string path, std::string body_type, AdminStreamHandler handler,
                                AdminGuard guard) {
  endpoints_.push_back({std::move(path),
                        {http::verb::post},
                        {},
                        AdminMatch::kExact,
                        guard,
                        std::move(handler),
                        std::move(body_type)});
}

bool AdminRoutes::streams(const AdminRequest& head) const {
  const auto* endpoint = find(split_target(head.target()).path);
  return endpoint && endpoint->stream_handler && head.method() == http::verb::post;
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

std::variant<const AdminRoutes::Endpoint*, AdminResponse> AdminRoutes::admit(
    const AdminCall& call) const {
  const AdminRequest& request = call.request;
  const auto* endpoint = find(split_target(request.target()).path);
  const auto method = request.method();
  if (!endpoint) {
    if (!is_read(method)) return method_not_allowed({http::verb::get, http::verb::head});
    return json_response(http::status::not_found, {{"error", "not found"}});
  }
  if (endpoint->guard == AdminGuard::kProtected) {
    // A browser's request is refused before the token is looked at.
    if (auto refusal =
            refuse_browser_request(request, call.local, access_.hosts, endpoint->body_type)) {
      return std::move(*refusal);
    }
    if (auto refusal = refuse_admin_request(request, access_)) return std::move(*refusal);
  }
  const auto& methods = endpoint->methods;
  if (std::find(methods.begin(), methods.end(), method) == methods.end()) {
    return method_not_allowed(methods);
  }
  return endpoint;
}

std::optional<AdminResponse> AdminRoutes::refuse(const AdminCall& head) const {
  auto admitted = admit(head);
  if (auto* refusal = std::get_if<AdminResponse>(&admitted)) return std::move(*refusal);
  return std::nullopt;
}

void AdminRoutes::dispatch(const AdminCall& call, AdminReply reply) const {
  auto admitted = admit(call);
  if (auto* refusal = std::get_if<AdminResponse>(&admitted)) return reply(std::move(*refusal));
  const AdminCall with_config{call.request, call.peer, call.local, config_};
  std::get<const Endpoint*>(admitted)->handler(with_config, std::move(reply));
}

void AdminRoutes::dispatch_stream(const AdminCall& head, std::shared_ptr<AdminBodyReader> body,
                                  AdminReply reply) const {
  auto admitted = admit(head);
  if (auto* refusal = std::get_if<AdminResponse>(&admitted)) return reply(std::move(*refusal));
  const auto* endpoint = std::get<const Endpoint*>(admitted);
  if (endpoint->stream_handler) {
    const AdminCall with_config{head.request, head.peer, head.local, config_};
    endpoint->stream_handler(with_config, std::move(body), std::move(reply));
  }
}

}  // namespace sluice
