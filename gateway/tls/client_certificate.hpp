// What a client's verified TLS certificate says (server.tls.client_auth):
// its subject, first URI and DNS names and SHA-256 fingerprint, read once
// per connection after the handshake and shared by its requests. The fields
// name the consumer, key limits (cert:FIELD) and go upstream (XFCC or
// headers). Pure apart from reading OpenSSL's verified peer certificate.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

typedef struct ssl_st SSL;

namespace sluice {

struct ClientCertificate {
  std::string subject;      // RFC 2253, e.g. "CN=svc-a,O=Example"
  std::string san_uri;      // the first URI subject alternative name; empty: none
  std::string san_dns;      // the first DNS subject alternative name; empty: none
  std::string fingerprint;  // SHA-256 of the DER certificate, lower-case hex
  std::string xfcc;         // the X-Forwarded-Client-Cert element (xfcc_value), made once

  // A field by its configuration name: subject, san_uri, san_dns, fingerprint;
  // nullopt for an empty field or another name.
  std::optional<std::string_view> field(std::string_view name) const;
};

bool is_client_certificate_field(std::string_view name);

// The connection's peer certificate when the handshake verified one; null
// when the client sent none (or verification did not pass).
std::shared_ptr<const ClientCertificate> verified_client_certificate(SSL* connection);

// The certificate as Envoy's X-Forwarded-Client-Cert element writes it:
// Hash=<fingerprint>;Subject="<subject>";URI=<uri>;DNS=<dns>.
std::string xfcc_value(const ClientCertificate& cert);

}  // namespace sluice
