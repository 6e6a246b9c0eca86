#include "gateway/auth/jwks_source.hpp"

#include <vector>


namespace sluice {

std::optional<JwksUrl> parse_jwks_url(std::string_view text, std::string& error) {
  auto out = parse_http_url(text, error);
  if (!out) return std::nullopt;
  // Whoever can change a plain-HTTP answer can install keys and forge any
  // token: http is for a key server on this host only.
  const bool loopback = out->host == "localhost" || out->host == "::1" ||
                        out->host.starts_with("127.");
  if (!out->tls && !loopback) {
    error = "http only for a key server on this host (127.0.0.1, ::1, localhost); use https";
    return std::nullopt;
  }
  return out;
}

std::shared_ptr<JwksSource> jwks_source(const JwksSettings& settings) {
  static std::mutex mutex;
  static std::vector<std::weak_ptr<JwksSource>> sources;
  std::lock_guard lock(mutex);
  std::shared_ptr<JwksSource> found;
  std::shared_ptr<const JwkSet> same_url_keys;
  std::erase_if(sources, [&](const std::weak_ptr<JwksSource>& weak) {
    auto source = weak.lock();
    if (!source) return true;
    if (source->settings().url.text == settings.url.text && !same_url_keys) {
      same_url_keys = source->keys();
    }
    if (!found && source->settings() == settings) found = std::move(source);
    return false;
  });
  if (found) return found;
  auto made = std::make_shared<JwksSource>(settings);
  if (same_url_keys) made->set_keys(std::move(same_url_keys));
  sources.push_back(made);
  return made;
}

}  // namespace sluice
