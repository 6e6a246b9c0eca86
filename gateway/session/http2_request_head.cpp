#include "gateway/session/http2_request_head.hpp"

#include "gateway/session/grpc_reply.hpp"
#include "gateway/session/request_path.hpp"
#include "upstream/h2/h2_head.hpp"
#include "upstream/proxy_headers.hpp"

namespace sluice {
namespace {

namespace http = boost::beast::http;

// A decoded header list this many times max_header_bytes is no request: an
// HPACK bomb (small frames that decode to a huge list).
constexpr std::size_t kHeaderBombFactor = 4;
// What SETTINGS_MAX_HEADER_LIST_SIZE counts per field beyond its name and value.
constexpr std::size_t kFieldOverhead = 32;

}  // namespace

bool Http2RequestHead::add(std::string_view name, std::string_view value, std::size_t limit,
                           const RouteConfig* route) {
  bytes_ += name.size() + value.size() + kFieldOverhead;
  if (bytes_ > limit * kHeaderBombFactor) return false;
  if (done_) {
    if (bytes_ <= limit && !name.empty() && name.front() != ':' &&
        !(route && is_sluice_only(sluice_only_headers(*route), name))) {
      trailers_.insert(name, value);
      has_trailers_ = true;
    }
    return true;
  }
  if (bytes_ > limit) too_large_ = true;
  if (too_large_) return true;
  if (!name.empty() && name.front() == ':') {
    // nghttp2 passes each pseudo-header once, before the other fields.
    if (name == ":method") req_.method_string(value);
    if (name == ":path") req_.target(value);
    if (name == ":authority" && !value.empty()) {
      req_.insert(http::field::host, value);
      authority_ = true;
    }
    return true;
  }
  if (name == "cookie") {
    if (!cookies_.empty()) cookies_.append("; ");
    cookies_.append(value);
    return true;
  }
  if (name == "content-type" && is_grpc_content_type(value)) grpc_ = true;
  if (name == "host" && authority_) return true;  // :authority wins
  req_.insert(name, value);
  return true;
}

void Http2RequestHead::finish() {
  done_ = true;
  if (!cookies_.empty()) req_.set(http::field::cookie, cookies_);
  if (const auto it = req_.find(http::field::content_length); it != req_.end()) {
    content_length_ = h2_content_length(it->value());
  }
}

}  // namespace sluice
