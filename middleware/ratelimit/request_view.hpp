// What rate-limit key extraction sees of a request: method, path, query,
// headers, client IP and route, as views. Header-only and pure; the views must
// outlive the calls that read them.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gateway/client_ip.hpp"
#include "gateway/config/config.hpp"
#include "gateway/tls/client_certificate.hpp"
#include "middleware/ratelimit/usage/request_fields.hpp"

namespace sluice {

// Looks a request header up by name (case-insensitive); nullopt when absent.
// With several lines of that header, the first one.
using HeaderLookup = std::function<std::optional<std::string_view>(std::string_view name)>;

// How many lines of a request header there are, by name (case-insensitive).
using HeaderCount = std::function<std::size_t(std::string_view name)>;

// What key extraction sees of a request. The views must outlive the calls.
struct RequestView {
  std::string_view method;
  std::string_view path;     // without the query string
  std::string_view query;    // after '?', without it; empty when none
  HeaderLookup header;       // may be empty: no headers
  HeaderCount header_count;  // may be empty: a header that `header` finds is one line
  IpAddress client_ip;
  std::string_view route;  // the matched route's name
  // A verified token's claims by path (jwt: key parts); null: none verified.
  const std::vector<std::pair<std::string, std::string>>* claims = nullptr;
  // The values of the JSON request body's members the route reads (body:
  // key parts), by path; null: none read.
  const usage::BodyFields* body_fields = nullptr;
  // The request body's whole length, when known (a prompt estimate).
  std::optional<std::uint64_t> body_length;
  // The connection's verified client certificate (cert: key parts); null: none.
  const ClientCertificate* cert = nullptr;
};

// The value of claim `path` of the verified token; nullopt when none.
inline std::optional<std::string_view> lookup_claim(const RequestView& request,
                                                    std::string_view path) {
  if (!request.claims) return std::nullopt;
  for (const auto& [p, v] : *request.claims) {
    if (p == path) return std::string_view(v);
  }
  return std::nullopt;
}

// The value of body member `path`; nullopt when the body lacks it (or is not JSON).
inline std::optional<std::string_view> lookup_body_field(const RequestView& request,
                                                         std::string_view path) {
  if (!request.body_fields) return std::nullopt;
  const usage::BodyField* field = usage::body_field(*request.body_fields, path);
  if (!field) return std::nullopt;
  return std::string_view(field->value);
}

// The limit's sizes for the request's model (limits.NAME.models): the entry
// the value of its first body: key part picks; null when none does (the body
// lacks it, or no entry matches).
inline const LimitConfig::ModelParams* model_entry(const LimitConfig& limit,
                                                   const RequestView& request) {
  for (const KeySource& source : limit.key) {
    if (source.kind != KeySource::Kind::kBody) continue;
    const auto value = lookup_body_field(request, source.name);
    return value && !value->empty() ? limit.for_model(*value) : nullptr;
  }
  return nullptr;
}

// The first line of header `name`; nullopt when absent or the view has no headers.
inline std::optional<std::string_view> lookup_header(const RequestView& request,
                                                     std::string_view name) {
  if (!request.header) return std::nullopt;
  return request.header(name);
}

// How many lines of header `name` the request carries.
inline std::size_t count_header(const RequestView& request, std::string_view name) {
  if (request.header_count) return request.header_count(name);
  return lookup_header(request, name) ? 1 : 0;
}

}  // namespace sluice
