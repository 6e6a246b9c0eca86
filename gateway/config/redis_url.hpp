// The Redis URL of the configuration: redis://[[user]:password@]host[:port][/db],
// rediss:// for TLS. Pure functions; messages never show a password.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "gateway/config/config.hpp"

namespace sluice {

// Parses redis://[user:password@]host:port[/db] and rediss://; returns an
// error message or fills the url-derived fields of `out`.
std::optional<std::string> parse_redis_url(std::string_view url, RedisConfig& out);

// A redis url with its credentials and anything after "?" or "#" hidden, so
// that it can be shown: "redis://user:***@host:6379/0". A lone userinfo word is
// a password.
std::string redact_redis_url(std::string_view url);

}  // namespace sluice
