// An HTTP/2 request's header block, and its trailers, as nghttp2 hands the
// fields over (it has checked the pseudo-headers: which, once each, before
// the rest), put in HTTP/1.1 terms for admission and the middleware: the
// method and path as the request line, :authority as Host (a Host field
// then is ignored), cookie crumbs as one Cookie header. The list is counted
// as SETTINGS_MAX_HEADER_LIST_SIZE counts it. Pure code: no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>


#include "gateway/config/config.hpp"
#include "gateway/session/request_admission.hpp"
#include "upstream/http_fields.hpp"

namespace sluice {

class Http2RequestHead {
 public:
  Http2RequestHead() { req_.version(11); }

  // A field of the head, or of the trailers once the head is whole (kept for
  // an HTTP/2 upstream within `limit`, but for those of `route` meant for
  // Sluice alone); false when the list has grown many times past `limit`
  // (an HPACK bomb). A head past `limit` is too_large().
  bool add(std::string_view name, std::string_view value, std::size_t limit,
           const RouteConfig* route);
  // The head is whole: Cookie is set (the request line and Host were set as
  // their pseudo-headers came) and Content-Length read.
  void finish();

  bool done() const { return done_; }
  bool too_large() const { return too_large_; }
  bool grpc() const { return grpc_; }
  ClientRequest& request() { return req_; }
  const ClientRequest& request() const { return req_; }
  // The Content-Length the client declared (digits only), once finished.
  std::optional<std::uint64_t> content_length() const { return content_length_; }
  // The trailers that ended the body (null: none).
  const HttpFields* trailers() const {
    return has_trailers_ ? &trailers_ : nullptr;
  }

 private:
  ClientRequest req_;
  std::string cookies_;
  bool authority_ = false;  // a non-empty :authority came (as Host)
  std::optional<std::uint64_t> content_length_;
  std::size_t bytes_ = 0;
  HttpFields trailers_;
  bool has_trailers_ = false;
  bool too_large_ = false;
  bool done_ = false;
  bool grpc_ = false;
};

}  // namespace sluice
