#include "gateway/session/local_reply.hpp"

#include <nlohmann/json.hpp>

namespace sluice {

std::string_view reason_for(unsigned status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 415:
      return "Unsupported Media Type";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Error";
  }
}

LocalReply make_local_reply(unsigned status, std::string_view message,
                            std::string_view request_id) {
  LocalReply reply;
  reply.status = status;
  nlohmann::json body = {{"status", status},
                         {"error", reason_for(status)},
                         {"message", message},
                         {"request_id", request_id}};
  reply.body = body.dump();
  reply.body += '\n';
  return reply;
}

void with_trace_id(LocalReply& reply, std::string_view trace_id) {
  const bool json = reply.content_type == "application/json" ||
                    reply.content_type == "application/problem+json";
  if (!json || reply.verbatim || trace_id.empty() || reply.body.empty() ||
      reply.body.front() != '{') {
    return;
  }
  std::string member = "\"trace_id\":\"";
  member += trace_id;  // hex digits only: nothing to escape
  member += reply.body.size() > 1 && reply.body[1] != '}' ? "\"," : "\"";
  reply.body.insert(1, member);
}

}  // namespace sluice
