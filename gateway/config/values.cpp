#include "gateway/config/values.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <variant>

#include "gateway/config/text.hpp"

namespace sluice::config {

std::optional<Millis> read_duration(YamlReader& r, const Field& f) {
  const auto v = r.integer(f, 1, kMaxDurationMs);
  if (!v) return std::nullopt;
  return Millis(*v);
}

std::optional<HostPort> read_address(YamlReader& r, const Field& f, bool listener) {
  const auto text = r.string(f);
  if (!text) return std::nullopt;
  auto parsed = parse_address(*text, listener);
  if (auto* message = std::get_if<std::string>(&parsed)) {
    r.error(f, *message);
    return std::nullopt;
  }
  return std::get<HostPort>(std::move(parsed));
}

std::optional<SecretFile> read_secret_file(YamlReader& r, const Field& f) {
  auto path = r.nonempty_string(f);
  if (!path) return std::nullopt;
  std::ifstream file(*path, std::ios::binary);
  if (!file) {
    r.error(f, "cannot read " + shown(*path) + ": " + std::strerror(errno));
    return std::nullopt;
  }
  std::ostringstream text;
  text << file.rdbuf();
  std::string secret = std::move(text).str();
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  return SecretFile{std::move(*path), std::move(secret)};
}

std::optional<Cidr> read_cidr(YamlReader& r, const Field& f) {
  const auto text = r.string(f);
  if (!text) return std::nullopt;
  auto c = parse_cidr(*text);
  if (!c || text->find_first_of(" \t") != std::string::npos) {
    r.error(f, "invalid CIDR " + shown(*text));
    return std::nullopt;
  }
  return c;
}

bool check_name(YamlReader& r, const Field& f, std::string_view name) {
  if (is_valid_name(name)) return true;
  r.error(f, "invalid name " + shown(name) + ": use letters, digits, \"_\", \"-\" and \".\"");
  return false;
}

std::optional<int> read_tls_version(YamlReader& r, const Field& f) {
  const auto text = r.string(f);
  if (text == "1.2") return 12;
  if (text == "1.3") return 13;
  if (text) r.error(f, "expected \"1.2\" or \"1.3\", got " + shown(*text));
  return std::nullopt;
}

}  // namespace sluice::config
