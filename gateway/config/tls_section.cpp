// server.tls: where TLS is served, the certificate files, the minimum
// version, the cipher lists and the sessions' periods. The files are loaded and each key checked
// against its certificate here, so that --check, a start and a reload refuse the same bad pairs.
#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/tls/client_certificate.hpp"
#include "gateway/config/text.hpp"
#include "gateway/config/values.hpp"
#include "gateway/tls/server_tls.hpp"

namespace sluice::config {
namespace {

constexpr int kMaxTicketKeys = 1000;

}  // namespace

std::optional<TlsCertificate> read_certificate_pair(YamlReader& r, const Mapping& m) {
  const Field* cert = r.required(m, "cert_file");
  const Field* key = r.required(m, "key_file");
  if (!cert || !key) return std::nullopt;
  auto cert_file = r.nonempty_string(*cert);
  auto key_file = r.nonempty_string(*key);
  if (!cert_file || !key_file) return std::nullopt;
  return TlsCertificate{std::move(*cert_file), std::move(*key_file)};
}

// client_auth and what a verified client certificate is used for.
void read_client_auth(YamlReader& r, const Mapping& m, TlsConfig& tls) {
  using ClientAuth = TlsConfig::ClientAuth;
  if (auto* v = m.get("client_auth")) {
    if (const auto s = r.string(*v)) {
      if (*s == "none") {
        tls.client_auth = ClientAuth::kNone;
      } else if (*s == "optional") {
        tls.client_auth = ClientAuth::kOptional;
      } else if (*s == "required") {
        tls.client_auth = ClientAuth::kRequired;
      } else {
        r.error(*v, "expected none, optional or required, got " + shown(*s));
      }
    }
  }
  const Field* ca = m.get("client_ca_file");
  if (ca) {
    if (auto s = r.nonempty_string(*ca)) tls.client_ca_file = *s;
  }
  if (tls.client_auth != ClientAuth::kNone && !ca) {
    r.error(m.self, "client_auth needs client_ca_file: the CAs that verify client certificates");
  }
  if (tls.client_auth == ClientAuth::kNone) {
    for (const char* key : {"client_consumer", "forward_client_cert"}) {
      if (auto* v = m.get(key)) r.error(*v, "only with client_auth optional or required");
    }
  }
  if (auto* v = m.get("client_consumer")) {
    if (const auto s = r.string(*v)) {
      if (is_client_certificate_field(*s)) {
        tls.client_consumer = *s;
      } else {
        r.error(*v, "expected subject, san_uri, san_dns or fingerprint, got " + shown(*s));
      }
    }
  }
  if (auto* v = m.get("forward_client_cert")) {
    if (const auto s = r.string(*v)) {
      if (*s == "none") {
        tls.forward_client_cert = TlsConfig::ForwardCert::kNone;
      } else if (*s == "xfcc") {
        tls.forward_client_cert = TlsConfig::ForwardCert::kXfcc;
      } else if (*s == "headers") {
        tls.forward_client_cert = TlsConfig::ForwardCert::kHeaders;
      } else {
        r.error(*v, "expected none, xfcc or headers, got " + shown(*s));
      }
    }
  }
}

void read_tls(YamlReader& r, const Field& f, ServerConfig& s, ReadNotes& notes) {
  const auto m = r.mapping(f, kTlsKeys.keys);
  if (!m) return;
  TlsConfig tls;
  bool valid = true;
  if (auto* v = m->get("listen")) {
    tls.listen = read_address(r, *v, true);
    notes.tls_listen = tls.listen ? std::optional<Field>(*v) : std::nullopt;
    valid = valid && tls.listen.has_value();
  }
  if (auto* v = m->get("min_version")) {
    const auto version = read_tls_version(r, *v);
    if (version) tls.min_version = *version;
    valid = valid && version.has_value();
  }
  const std::pair<std::string_view, Millis*> durations[] = {
      {"session_timeout_ms", &tls.session_timeout},
      {"ticket_key_rotation_ms", &tls.ticket_key_rotation}};
  bool periods_read = true;
  for (const auto& [key, target] : durations) {
    if (auto* v = m->get(key)) {
      if (auto d = read_duration(r, *v)) {
        *target = *d;
      } else {
        periods_read = false;
      }
    }
  }
  // A replaced key is kept for a session timeout: at most kMaxTicketKeys of them.
  const Millis shortest = tls.session_timeout / kMaxTicketKeys;
  if (periods_read && tls.ticket_key_rotation < shortest) {
    const Field* v = m->get("ticket_key_rotation_ms");
    r.error(v ? *v : f, "must be at least " + std::to_string(shortest.count()) +
                            " (session_timeout_ms / " + std::to_string(kMaxTicketKeys) +
                            ": at most that many ticket keys are held), got " +
                            std::to_string(tls.ticket_key_rotation.count()));
    periods_read = false;
  }
  valid = valid && periods_read;
  // Cipher lists OpenSSL takes nothing from are refused here, not at the first handshake.
  const std::pair<std::string_view, bool> lists[] = {{"ciphers", false}, {"ciphersuites", true}};
  for (const auto& [key, tls13] : lists) {
    const Field* v = m->get(key);
    if (!v) continue;
    auto text = r.nonempty_string(*v);
    if (!text) {
      valid = false;
      continue;
    }
    if (auto wrong = cipher_list_error(*text, tls13); !wrong.empty()) {
      r.error(*v, wrong);
      valid = false;
      continue;
    }
    (tls13 ? tls.ciphersuites : tls.ciphers) = std::move(*text);
  }
  auto first = read_certificate_pair(r, *m);
  valid = valid && first.has_value();
  if (first) tls.certificates.push_back(std::move(*first));
  if (auto* v = m->get("certificates")) {
    if (auto items = r.list(*v)) {
      for (const auto& item : *items) {
        auto pair_map = r.mapping(item, kTlsCertificateKeys.keys);
        auto pair = pair_map ? read_certificate_pair(r, *pair_map) : std::nullopt;
        valid = valid && pair.has_value();
        if (pair) tls.certificates.push_back(std::move(*pair));
      }
    } else {
      valid = false;
    }
  }
  if (!valid) return;
  std::string error;
  tls.http2 = s.http2.enabled;
  read_client_auth(r, *m, tls);
  tls.contexts = ServerTls::build(tls, error);
  if (!tls.contexts) return r.error(f, error);
  s.tls = std::move(tls);
}

}  // namespace sluice::config
