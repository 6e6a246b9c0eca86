#include "gateway/tls/client_certificate.hpp"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "common/hex.hpp"

namespace sluice {
namespace {

std::string first_san(X509* cert, int type) {
  std::string out;
  auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (!sans) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(sans) && out.empty(); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(sans, i);
    if (name->type != type) continue;
    const ASN1_STRING* text = type == GEN_URI ? name->d.uniformResourceIdentifier : name->d.dNSName;
    out.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(text)),
               static_cast<std::size_t>(ASN1_STRING_length(text)));
  }
  GENERAL_NAMES_free(sans);
  return out;
}

std::string subject_of(X509* cert) {
  std::string out;
  BIO* bio = BIO_new(BIO_s_mem());
  if (!bio) return out;
  if (X509_NAME_print_ex(bio, X509_get_subject_name(cert), 0, XN_FLAG_RFC2253) >= 0) {
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio, &data);
    if (n > 0) out.assign(data, static_cast<std::size_t>(n));
  }
  BIO_free(bio);
  return out;
}

// Text that goes upstream in a header: control characters become '?'.
std::string header_safe(std::string text) {
  for (char& c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) c = '?';
  }
  return text;
}

// A value in double quotes, '"' and '\\' escaped (a subject always; another
// value when it holds a separator).
void append_quoted(std::string& out, std::string_view value) {
  out += '"';
  for (const char c : value) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += '"';
}

void append_value(std::string& out, std::string_view value) {
  if (value.find_first_of(",;=\"") == std::string_view::npos) {
    out += value;
  } else {
    append_quoted(out, value);
  }
}

}  // namespace

std::optional<std::string_view> ClientCertificate::field(std::string_view name) const {
  const std::string* value = name == "subject"       ? &subject
                             : name == "san_uri"     ? &san_uri
                             : name == "san_dns"     ? &san_dns
                             : name == "fingerprint" ? &fingerprint
                                                     : nullptr;
  if (!value || value->empty()) return std::nullopt;
  return std::string_view(*value);
}

bool is_client_certificate_field(std::string_view name) {
  return name == "subject" || name == "san_uri" || name == "san_dns" || name == "fingerprint";
}

std::shared_ptr<const ClientCertificate> verified_client_certificate(SSL* connection) {
  X509* cert = SSL_get0_peer_certificate(connection);
  if (!cert || SSL_get_verify_result(connection) != X509_V_OK) return nullptr;
  auto out = std::make_shared<ClientCertificate>();
  out->subject = header_safe(subject_of(cert));
  out->san_uri = header_safe(first_san(cert, GEN_URI));
  out->san_dns = header_safe(first_san(cert, GEN_DNS));
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (X509_digest(cert, EVP_sha256(), digest, &length) == 1) {
    hex::append(out->fingerprint, std::span<const unsigned char>(digest, length));
  }
  out->xfcc = xfcc_value(*out);
  return out;
}

std::string xfcc_value(const ClientCertificate& cert) {
  std::string out = "Hash=" + cert.fingerprint;
  out += ";Subject=";
  append_quoted(out, cert.subject);
  if (!cert.san_uri.empty()) {
    out += ";URI=";
    append_value(out, cert.san_uri);
  }
  if (!cert.san_dns.empty()) {
    out += ";DNS=";
    append_value(out, cert.san_dns);
  }
  return out;
}

}  // namespace sluice
