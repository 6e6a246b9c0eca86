#include "middleware/ratelimit/admin/admin_caller.hpp"

#include <boost/beast/http/field.hpp>

#include "common/ascii.hpp"
#include "common/hex.hpp"
#include "middleware/ratelimit/descriptors.hpp"

namespace sluice {

std::string admin_caller(const AdminCall& call) {
  std::string out = "peer ";
  out += call.peer.empty() ? std::string_view("unknown") : call.peer;
  const auto it = call.request.find(boost::beast::http::field::authorization);
  if (it == call.request.end()) return out + ", no token";
  std::string_view credential = ascii::trim(it->value());
  if (const auto space = credential.find(' '); space != std::string_view::npos) {
    credential = ascii::trim(credential.substr(space + 1));  // after the scheme
  }
  std::string fingerprint;
  hex::append(fingerprint, key_hash(credential));  // the SHA-256, truncated
  return out + ", token " + fingerprint.substr(0, 12);
}

}  // namespace sluice
