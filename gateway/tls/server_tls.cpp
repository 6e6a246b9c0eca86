#include "gateway/tls/server_tls.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/ssl/context.hpp>

#include "common/ascii.hpp"
#include "gateway/config/config.hpp"
#include "gateway/tls/ticket_keys.hpp"

namespace sluice {
namespace {

namespace ssl = boost::asio::ssl;

constexpr unsigned char kSessionContext[] = "sluice";

std::string lowercase(std::string_view text) {
  std::string out(text);
  ascii::to_lower_in_place(out);
  return out;
}

// The DNS names of a certificate: its subjectAltName DNS entries, or its
// common name when it has none.
std::vector<std::string> certificate_names(X509* cert) {
  std::vector<std::string> names;
  if (!cert) return names;
  auto* sans =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* name = sk_GENERAL_NAME_value(sans, i);
      if (name->type != GEN_DNS) continue;
      const auto* data = ASN1_STRING_get0_data(name->d.dNSName);
      names.push_back(lowercase(std::string_view(reinterpret_cast<const char*>(data),
                                                 ASN1_STRING_length(name->d.dNSName))));
    }
    GENERAL_NAMES_free(sans);
  }
  if (names.empty()) {
    char common_name[256];
    if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, common_name,
                                  sizeof common_name) > 0) {
      names.push_back(lowercase(common_name));
    }
  }
  return names;
}

// ALPN: the first of Sluice's protocols the client offers (h2, when HTTP/2
// is on, then http/1.1); none offered: no protocol is acknowledged and the
// client decides whether HTTP/1.1 will do.
int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                unsigned int inlen, void* arg) {
  static const unsigned char kHttp11[] = "\x08http/1.1";
  static const unsigned char kH2Http11[] = "\x02h2\x08http/1.1";
  const bool h2 = arg != nullptr;
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, h2 ? kH2Http11 : kHttp11,
                            h2 ? sizeof kH2Http11 - 1 : sizeof kHttp11 - 1, in,
                            inlen) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

// The callback's argument: non-null offers h2.
int offer_h2;

struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};

std::unique_ptr<EVP_PKEY, KeyFree> read_private_key(const std::string& path) {
  ERR_clear_error();
  std::unique_ptr<BIO, decltype(&BIO_free)> file(BIO_new_file(path.c_str(), "r"), BIO_free);
  if (!file) return nullptr;
  // No passphrase: an encrypted key fails here rather than prompting on a terminal.
  const auto no_passphrase = [](char*, int, int, void*) { return 0; };
  return std::unique_ptr<EVP_PKEY, KeyFree>(
      PEM_read_bio_PrivateKey(file.get(), nullptr, no_passphrase, nullptr));
}

// A session belongs to the SNI name it was made under: each name gets its own
// session id context (a digest of the lowercase name; none sent is a name of
// its own), which OpenSSL compares before it resumes a session from a ticket
// or the cache. A session made for one name is not resumed under another
// (RFC 6066, section 3), so it cannot keep the first name's certificate.
// Set in the ClientHello callback, before OpenSSL looks at any session.
//
// `arg` is the contexts' client-certificate settings (the mode and a digest
// of the CA file's bytes): a session made under other settings (before a
// reload required certificates, or changed the CAs) is not resumed either,
// since a resumed handshake asks for no certificate.
int bind_sessions_to_server_name(SSL* connection, int*, void* arg) {
  const unsigned char* extension = nullptr;
  std::size_t size = 0;
  std::string_view name;
  if (SSL_client_hello_get0_ext(connection, TLSEXT_TYPE_server_name, &extension, &size) == 1) {
    name = server_name_of_extension(extension, size);
  }
  std::string context(reinterpret_cast<const char*>(kSessionContext), sizeof kSessionContext);
  if (arg) context += *static_cast<const std::string*>(arg);
  context += lowercase(name);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(context.data()), context.size(), digest);
  static_assert(sizeof digest <= SSL_MAX_SID_CTX_LENGTH);
  if (SSL_set_session_id_context(connection, digest, sizeof digest) != 1) {
    return SSL_CLIENT_HELLO_ERROR;
  }
  return SSL_CLIENT_HELLO_SUCCESS;
}

std::string openssl_reason();

// Client certificates asked for (or required) and verified by the CAs of
// client_ca_file, whose names are offered to the client.
std::string ask_client_certificates(SSL_CTX* native, const TlsConfig& config) {
  ERR_clear_error();
  if (SSL_CTX_load_verify_locations(native, config.client_ca_file.c_str(), nullptr) != 1) {
    return "cannot load client_ca_file " + config.client_ca_file + ": " + openssl_reason();
  }
  STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(config.client_ca_file.c_str());
  if (!names) return "no CA certificate in client_ca_file " + config.client_ca_file;
  SSL_CTX_set_client_CA_list(native, names);
  int mode = SSL_VERIFY_PEER | SSL_VERIFY_CLIENT_ONCE;
  if (config.client_auth == TlsConfig::ClientAuth::kRequired) mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
  SSL_CTX_set_verify(native, mode, nullptr);
  SSL_CTX_set_verify_depth(native, 5);
  return {};
}

// The reason of OpenSSL's latest error, cleared.
std::string openssl_reason() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "unknown error";
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

}  // namespace

struct ServerTls::Impl {
  std::vector<std::unique_ptr<ssl::context>> contexts;  // [0] the default
  std::vector<std::vector<std::string>> names;
  TicketKeys::Clock::duration ticket_key_rotation{};
  TicketKeys::Clock::duration session_timeout{};
  std::shared_ptr<TicketKeys> ticket_keys;  // shared with the contexts before a reload
  // The client-certificate settings sessions are bound to (see
  // bind_sessions_to_server_name); empty without client_auth.
  std::string client_auth_binding;

  // Every context seals and opens its tickets with `keys`.
  void use_ticket_keys(std::shared_ptr<TicketKeys> keys) {
    ticket_keys = std::move(keys);
    for (const auto& context : contexts) ticket_keys->attach(context->native_handle());
  }

  // Switches the connection to the certificate its SNI names.
  static int on_server_name(SSL* connection, int*, void* arg) {
    const char* name = SSL_get_servername(connection, TLSEXT_NAMETYPE_host_name);
    if (!name) return SSL_TLSEXT_ERR_NOACK;
    const auto& self = *static_cast<const Impl*>(arg);
    const std::size_t chosen = pick_certificate(self.names, name);
    if (chosen != 0) SSL_set_SSL_CTX(connection, self.contexts[chosen]->native_handle());
    return SSL_TLSEXT_ERR_OK;
  }

  // One context for `pair`; an empty string, or what is wrong.
  std::string add(const TlsCertificate& pair, const TlsConfig& config) {
    auto context = std::make_unique<ssl::context>(ssl::context::tls_server);
    SSL_CTX* native = context->native_handle();
    SSL_CTX_set_min_proto_version(native,
                                  config.min_version == 13 ? TLS1_3_VERSION : TLS1_2_VERSION);
    // Whole seconds, rounded up: a session (a ticket's lifetime hint, a cache entry).
    SSL_CTX_set_timeout(native, static_cast<long>((config.session_timeout.count() + 999) / 1000));
    SSL_CTX_set_options(
        native, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
    SSL_CTX_set_session_id_context(native, kSessionContext, sizeof kSessionContext - 1);
    SSL_CTX_set_session_cache_mode(native, SSL_SESS_CACHE_SERVER);
    SSL_CTX_set_alpn_select_cb(native, select_alpn, config.http2 ? &offer_h2 : nullptr);
    SSL_CTX_set_client_hello_cb(native, bind_sessions_to_server_name, &client_auth_binding);
    // The lists were checked when the configuration was read.
    if (SSL_CTX_set_cipher_list(native, config.ciphers.c_str()) != 1 ||
        SSL_CTX_set_ciphersuites(native, config.ciphersuites.c_str()) != 1) {
      ERR_clear_error();
      return "no usable cipher in server.tls.ciphers or server.tls.ciphersuites";
    }
    boost::system::error_code ec;
    context->use_certificate_chain_file(pair.cert_file, ec);
    if (ec) return "cannot load certificate chain " + pair.cert_file + ": " + ec.message();
    // The key is read on its own first, so that a key that does not load
    // and one that does not match are told apart.
    auto key = read_private_key(pair.key_file);
    if (!key) return "cannot load private key " + pair.key_file + ": " + openssl_reason();
    if (SSL_CTX_use_PrivateKey(native, key.get()) != 1 || SSL_CTX_check_private_key(native) != 1) {
      ERR_clear_error();
      return "private key " + pair.key_file + " does not match certificate " + pair.cert_file;
    }
    if (config.client_auth != TlsConfig::ClientAuth::kNone) {
      if (auto why = ask_client_certificates(native, config); !why.empty()) return why;
    }
    names.push_back(certificate_names(SSL_CTX_get0_certificate(native)));
    contexts.push_back(std::move(context));
    return {};
  }
};

ServerTls::ServerTls() : impl_(std::make_unique<Impl>()) {}
ServerTls::~ServerTls() = default;

std::shared_ptr<ServerTls> ServerTls::build(const TlsConfig& config, std::string& error) {
  auto tls = std::make_shared<ServerTls>();
  if (config.client_auth != TlsConfig::ClientAuth::kNone) {
    std::string& binding = tls->impl_->client_auth_binding;
    binding = config.client_auth == TlsConfig::ClientAuth::kRequired ? "client-auth required:"
                                                                    : "client-auth optional:";
    std::unique_ptr<BIO, decltype(&BIO_free)> file(BIO_new_file(config.client_ca_file.c_str(), "rb"),
                                                   BIO_free);
    if (!file) {
      error = "cannot read client_ca_file " + config.client_ca_file + ": " + openssl_reason();
      return nullptr;
    }
    std::string bytes;
    char chunk[4096];
    int n = 0;
    while ((n = BIO_read(file.get(), chunk, sizeof chunk)) > 0) bytes.append(chunk, static_cast<std::size_t>(n));
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), digest);
    binding.append(reinterpret_cast<const char*>(digest), sizeof digest);
  }
  for (const auto& pair : config.certificates) {
    error = tls->impl_->add(pair, config);
    if (!error.empty()) return nullptr;
  }
  if (tls->impl_->contexts.empty()) {
    error = "no certificate";
    return nullptr;
  }
  tls->impl_->ticket_key_rotation = config.ticket_key_rotation;
  tls->impl_->session_timeout = config.session_timeout;
  tls->impl_->use_ticket_keys(
      std::make_shared<TicketKeys>(config.ticket_key_rotation, config.session_timeout));
  SSL_CTX* first = tls->impl_->contexts.front()->native_handle();
  SSL_CTX_set_tlsext_servername_callback(first, &Impl::on_server_name);
  SSL_CTX_set_tlsext_servername_arg(first, tls->impl_.get());
  return tls;
}

boost::asio::ssl::context& ServerTls::context() const {
  return *impl_->contexts.front();
}

const std::vector<std::vector<std::string>>& ServerTls::names() const {
  return impl_->names;
}

// The running keys go on sealing and opening tickets, with this
// configuration's periods; the keys these contexts were built with are
// dropped unused.
void ServerTls::keep_ticket_keys(const ServerTls& previous) const {
  previous.impl_->ticket_keys->set_periods(impl_->ticket_key_rotation, impl_->session_timeout);
  impl_->use_ticket_keys(previous.impl_->ticket_keys);
}

TicketKeys& ServerTls::ticket_keys() const {
  return *impl_->ticket_keys;
}

std::string cipher_list_error(const std::string& list, bool tls13) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context(SSL_CTX_new(TLS_server_method()),
                                                            SSL_CTX_free);
  if (!context) return "cannot check the list: " + openssl_reason();
  const int taken = tls13 ? SSL_CTX_set_ciphersuites(context.get(), list.c_str())
                          : SSL_CTX_set_cipher_list(context.get(), list.c_str());
  ERR_clear_error();
  if (taken != 1) return "OpenSSL knows no cipher in \"" + list + "\"";
  return {};
}

// server_name_list: a 2-byte length, then entries of a type byte (0: a host
// name) and a 2-byte-length-prefixed name.
std::string_view server_name_of_extension(const unsigned char* data, std::size_t size) {
  if (size < 2) return {};
  const std::size_t list = (std::size_t{data[0]} << 8) | data[1];
  if (list != size - 2) return {};
  std::size_t at = 2;
  while (at + 3 <= size) {
    const unsigned type = data[at];
    const std::size_t length = (std::size_t{data[at + 1]} << 8) | data[at + 2];
    at += 3;
    if (length > size - at) return {};
    if (type == 0) return {reinterpret_cast<const char*>(data + at), length};
    at += length;
  }
  return {};
}

std::size_t pick_certificate(const std::vector<std::vector<std::string>>& names,
                             std::string_view server_name) {
  const std::string wanted = lowercase(server_name);
  for (std::size_t i = 0; i < names.size(); ++i) {
    for (const auto& name : names[i]) {
      if (name == wanted) return i;
    }
  }
  const auto dot = wanted.find('.');
  if (dot == std::string::npos || dot == 0) return 0;
  const std::string_view parent = std::string_view(wanted).substr(dot);  // ".example.com"
  for (std::size_t i = 0; i < names.size(); ++i) {
    for (const auto& name : names[i]) {
      if (name.size() > 2 && name.starts_with("*.") && std::string_view(name).substr(1) == parent) {
        return i;
      }
    }
  }
  return 0;
}

}  // namespace sluice
