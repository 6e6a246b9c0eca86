#include "middleware/ratelimit/consumers/identity_reply.hpp"

#include "middleware/ratelimit/api_key.hpp"
#include "middleware/ratelimit/headers.hpp"

namespace sluice {
namespace {

LocalReply problem(unsigned status, std::string_view title, std::string_view detail) {
  LocalReply reply;
  reply.status = status;
  reply.content_type = std::string{kProblemJsonContentType};
  reply.body = R"({"type":"about:blank","title":")" + std::string(title) +
               R"(","status":)" + std::to_string(status) + R"(,"detail":")" +
               std::string(detail) + R"("})";
  reply.headers.emplace_back("Cache-Control", "no-store");
  return reply;
}

}  // namespace

LocalReply unknown_key_reply(const ApiKeysConfig& api_keys) {
  LocalReply reply = problem(401, "Unauthorized", "unknown API key");
  reply.headers.emplace_back(
      "WWW-Authenticate", reads_bearer_credential(api_keys)
                              ? std::string(R"(Bearer realm="sluice", error="invalid_token")")
                              : R"(ApiKey realm="sluice", header=)" + sf_string(api_keys.header));
  return reply;
}

LocalReply disabled_consumer_reply() {
  return problem(403, "Forbidden", "the consumer holding this API key is disabled");
}

}  // namespace sluice
