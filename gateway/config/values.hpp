// Sluice's value types read from a YAML field: durations, addresses, CIDRs
// and user-chosen names, each with its bounds. Errors go to the reader.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include "gateway/config/config.hpp"
#include "gateway/config/yaml_reader.hpp"

namespace sluice::config {

constexpr std::int64_t kMaxDurationMs = std::numeric_limits<std::int32_t>::max();  // ~24.8 days
constexpr std::int64_t kMaxCount = 1000000;  // failures, connections

// Milliseconds, at least 1.
std::optional<Millis> read_duration(YamlReader& r, const Field& f);
// A TLS version, "1.2" or "1.3", as 12 or 13.
std::optional<int> read_tls_version(YamlReader& r, const Field& f);

// "host:port" or "[v6]:port"; a listener's host must be an IP literal.
std::optional<HostPort> read_address(YamlReader& r, const Field& f, bool listener);

std::optional<Cidr> read_cidr(YamlReader& r, const Field& f);

// A secret read from the file a field names (a key secret, a token): the
// path as given and the file's bytes without trailing line breaks; nullopt,
// with the error reported, when the field is not a path or the file cannot be
// read. A file that users other than its owner and group may read or write,
// or that its group may write, gets a warning.
struct SecretFile {
  std::string path;
  std::string secret;
};
std::optional<SecretFile> read_secret_file(YamlReader& r, const Field& f);

// A user-chosen name (a key of upstreams or limits, a route name); false, with
// the error reported, when it is not a valid name.
bool check_name(YamlReader& r, const Field& f, std::string_view name);

}  // namespace sluice::config
