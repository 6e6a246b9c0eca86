#include "gateway/session/local_reply.hpp"

#include <array>

#include <boost/beast/http/status.hpp>
#include <nlohmann/json.hpp>

#include "common/ascii.hpp"

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

namespace {

// Names a local reply's head frames itself.
bool framing_name(std::string_view name) {
  return ascii::iequals(name, "Content-Length") || ascii::iequals(name, "Transfer-Encoding") ||
         ascii::iequals(name, "Connection");
}

void append_field(std::string& out, std::string_view name, std::string_view value) {
  out.append(name).append(": ").append(value).append("\r\n");
}

}  // namespace

void serialize_local_head(std::string& out, const LocalReply& reply,
                          const LocalHeadOptions& options) {
  static const HeaderList kNone;
  const HeaderList& steps = options.steps ? *options.steps : kNone;
  const std::array<std::pair<std::string_view, std::string_view>, 3> fixed{
      {{"Server", "sluice"},
       {"Content-Type", reply.content_type},
       {"X-Request-Id", options.request_id}}};
  // Field i of the lists in order (fixed, steps, reply.headers).
  const std::size_t count = fixed.size() + steps.size() + reply.headers.size();
  const auto field = [&](std::size_t i) -> std::pair<std::string_view, std::string_view> {
    if (i < fixed.size()) return fixed[i];
    i -= fixed.size();
    if (i < steps.size()) return {steps[i].first, steps[i].second};
    i -= steps.size();
    return {reply.headers[i].first, reply.headers[i].second};
  };
  const auto replaced_later = [&](std::size_t i, std::string_view name) {
    for (std::size_t j = i + 1; j < count; ++j) {
      if (ascii::iequals(field(j).first, name)) return true;
    }
    return false;
  };

  out.clear();
  const unsigned status = reply.status;
  out.append("HTTP/1.1 ").append(std::to_string(status)).append(" ");
  out.append(boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status)));
  out.append("\r\n");
  for (std::size_t i = 0; i < count; ++i) {
    const auto [name, value] = field(i);
    if (framing_name(name) || replaced_later(i, name)) continue;
    if (value.empty() && ascii::iequals(name, "Content-Type")) continue;  // a reply without a body
    append_field(out, name, value);
  }
  append_field(out, "Content-Length", std::to_string(options.content_length));
  if (!options.keep_alive) {
    out.append("Connection: close\r\n");
  } else if (options.announce_keep_alive) {
    out.append("Connection: keep-alive\r\n");
  }
  out.append("\r\n");
}

}  // namespace sluice
