#include "gateway/config/values.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <variant>

#include <sys/stat.h>

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
  // A secret that other users of the host can read is no secret (as ssh
  // says of a private key): warn, and go on. The file's group may read it
  // (0640 with the service's group, as Kubernetes mounts a secret for fsGroup),
  // not write it.
  struct stat info {};
  if (::stat(path->c_str(), &info) == 0 && (info.st_mode & (S_IRWXO | S_IWGRP)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(info.st_mode & 07777));
    r.warning(f, shown(*path) + " can be read or written by other users (mode " + mode +
                     "); make it readable by the gateway's user only (chmod 600)");
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
