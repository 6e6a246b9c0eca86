#include "gateway/admin/admin_access.hpp"

#include <cstddef>

#include "common/ascii.hpp"

namespace sluice {
namespace {

namespace http = boost::beast::http;

}  // namespace

std::optional<std::string_view> bearer_token(std::string_view authorization) {
  const std::string_view value = ascii::trim(authorization);
  constexpr std::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size()) return std::nullopt;
  if (!ascii::iequals(value.substr(0, kScheme.size()), kScheme)) return std::nullopt;
  const std::string_view token = ascii::trim(value.substr(kScheme.size()));
  if (token.empty()) return std::nullopt;
  return token;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Every byte of the longer string is looked at, whatever the contents.
  const std::size_t n = a.size() > b.size() ? a.size() : b.size();
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = static_cast<unsigned char>(i < a.size() ? a[i] : 0);
    const auto y = static_cast<unsigned char>(i < b.size() ? b[i] : 0);
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

std::optional<AdminResponse> refuse_admin_request(const AdminRequest& request,
                                                  const AdminAccess& access) {
  if (access.token.empty()) {
    if (access.loopback_listener) return std::nullopt;
    return json_response(http::status::forbidden,
                         {{"error",
                           "admin.token_file is not set: this endpoint answers only on a loopback "
                           "admin listener"}});
  }
  const auto header = request.find(http::field::authorization);
  const auto token =
      header == request.end() ? std::nullopt : bearer_token(std::string_view(header->value()));
  if (token && constant_time_equal(*token, access.token)) return std::nullopt;
  auto res = json_response(http::status::unauthorized, {{"error", "missing or wrong admin token"}});
  res.set(http::field::www_authenticate, "Bearer");
  return res;
}

}  // namespace sluice
