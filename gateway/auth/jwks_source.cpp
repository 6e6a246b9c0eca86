#include "gateway/auth/jwks_source.hpp"

#include <vector>

#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>

namespace sluice {

std::optional<JwksUrl> parse_jwks_url(std::string_view text, std::string& error) {
  const auto parsed = boost::urls::parse_absolute_uri(text);
  if (!parsed) {
    error = "not a URL";
    return std::nullopt;
  }
  const boost::urls::url_view& url = *parsed;
  JwksUrl out;
  out.text = std::string(text);
  if (url.scheme() == "https") {
    out.tls = true;
    out.port = 443;
  } else if (url.scheme() == "http") {
    out.tls = false;
    out.port = 80;
  } else {
    error = "the scheme must be https or http";
    return std::nullopt;
  }
  if (url.has_userinfo() || url.has_fragment()) {
    error = "no user information or fragment";
    return std::nullopt;
  }
  out.host = std::string(url.encoded_host_address());
  if (out.host.size() > 2 && out.host.front() == '[' && out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  }
  if (out.host.empty()) {
    error = "no host";
    return std::nullopt;
  }
  // Whoever can change a plain-HTTP answer can install keys and forge any
  // token: http is for a key server on this host only.
  const bool loopback = out.host == "localhost" || out.host == "::1" ||
                        out.host.starts_with("127.");
  if (!out.tls && !loopback) {
    error = "http only for a key server on this host (127.0.0.1, ::1, localhost); use https";
    return std::nullopt;
  }
  if (url.has_port()) {
    const auto port = url.port_number();
    if (port == 0) {
      error = "invalid port";
      return std::nullopt;
    }
    out.port = port;
  }
  out.target = url.encoded_path().empty() ? "/" : std::string(url.encoded_path());
  if (url.has_query()) out.target += "?" + std::string(url.encoded_query());
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
