#include "upstream/upstream_tls.hpp"

#include <sys/stat.h>

#include <cstring>

#include <openssl/err.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/ip/address.hpp>

namespace sluice {
namespace {

std::string openssl_error(const std::string& what) {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return what;
  if (ERR_SYSTEM_ERROR(code)) return what + ": " + std::strerror(ERR_GET_REASON(code));
  if (const char* reason = ERR_reason_error_string(code)) return what + ": " + reason;
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return what + ": " + text;
}

// The settings and what each file was when it is read (a file that cannot be
// stat'ed counts as its name alone: loading it fails anyway).
std::array<std::uint64_t, 4> fingerprint_of(const UpstreamTlsConfig& c) {
  std::string text = c.ca_file + '\n' + c.server_name + '\n' + c.certificate_file + '\n' +
                     c.key_file + '\n' + std::to_string(c.min_version);
  for (const std::string* file : {&c.ca_file, &c.certificate_file, &c.key_file}) {
    struct stat st {};
    if (file->empty() || ::stat(file->c_str(), &st) != 0) continue;
    text += '\n' + std::to_string(st.st_dev) + ':' + std::to_string(st.st_ino) + ':' +
            std::to_string(st.st_size) + ':' + std::to_string(st.st_mtim.tv_sec) + '.' +
            std::to_string(st.st_mtim.tv_nsec);
  }
  std::array<std::uint64_t, 4> digest{};
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(),
         reinterpret_cast<unsigned char*>(digest.data()));
  return digest;
}

bool is_ip_literal(const std::string& host) {
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  return !ec;
}

}  // namespace

std::shared_ptr<const UpstreamTls> UpstreamTls::build(const UpstreamTlsConfig& config,
                                                      std::string& error) {
  ERR_clear_error();
  std::shared_ptr<UpstreamTls> tls(new UpstreamTls());
  tls->config_ = config;
  // Before the files are read: a file replaced meanwhile makes a context that
  // is never taken for the replacement's.
  tls->fingerprint_ = fingerprint_of(config);
  tls->context_ = SSL_CTX_new(TLS_client_method());
  if (!tls->context_) {
    error = openssl_error("cannot make a TLS context");
    return nullptr;
  }
  SSL_CTX* ctx = tls->context_;
  SSL_CTX_set_min_proto_version(ctx, config.min_version == 13 ? TLS1_3_VERSION : TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
  // No passphrase: an encrypted key fails here rather than prompting on a terminal.
  SSL_CTX_set_default_passwd_cb(ctx, [](char*, int, int, void*) { return 0; });
  // Sessions are kept by the pools (per worker and server), not by OpenSSL's cache.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  if (config.ca_file.empty()) {
    if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
      error = openssl_error("cannot load the system's trusted CAs");
      return nullptr;
    }
  } else if (SSL_CTX_load_verify_locations(ctx, config.ca_file.c_str(), nullptr) != 1) {
    error = openssl_error("cannot load CA file " + config.ca_file);
    return nullptr;
  }
  if (!config.server_name.empty()) {
    // A name OpenSSL could not check would leave the servers unverified.
    SSL* probe = SSL_new(ctx);
    const bool usable = probe && tls->prepare(probe, config.server_name, nullptr);
    SSL_free(probe);
    if (!usable) {
      error = "server_name " + config.server_name + " is neither a DNS name nor an IP address " +
              "that a certificate can be checked against";
      ERR_clear_error();
      return nullptr;
    }
  }
  if (!config.certificate_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, config.certificate_file.c_str()) != 1) {
      error = openssl_error("cannot load certificate_file " + config.certificate_file);
      return nullptr;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, config.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      error = openssl_error("cannot load key_file " + config.key_file);
      return nullptr;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      error = openssl_error("key_file " + config.key_file + " does not match certificate_file " +
                            config.certificate_file);
      return nullptr;
    }
  }
  return tls;
}

UpstreamTls::~UpstreamTls() {
  SSL_CTX_free(context_);
}

bool UpstreamTls::prepare(SSL* ssl, const std::string& host, SSL_SESSION* resume,
                          bool h2) const {
  const std::string& name = config_.server_name.empty() ? host : config_.server_name;
  if (is_ip_literal(name)) {
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) != 1) return false;
  } else {
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (SSL_set_tlsext_host_name(ssl, name.c_str()) != 1 || SSL_set1_host(ssl, name.c_str()) != 1) {
      return false;
    }
  }
  if (resume) SSL_set_session(ssl, resume);
  static constexpr unsigned char kH2[] = {2, 'h', '2'};
  if (h2 && SSL_set_alpn_protos(ssl, kH2, sizeof kH2) != 0) return false;
  return true;
}

bool UpstreamTls::negotiated_h2(SSL* ssl) {
  const unsigned char* data = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl, &data, &len);
  return len == 2 && data[0] == 'h' && data[1] == '2';
}

std::string UpstreamTls::failure_reason(SSL* ssl, const std::string& fallback) {
  const long result = SSL_get_verify_result(ssl);
  if (result != X509_V_OK) {
    return std::string("certificate verify failed: ") + X509_verify_cert_error_string(result);
  }
  return fallback;
}

TlsSessionRef resumable_session(SSL* ssl) {
  const SSL_SESSION* current = SSL_get0_session(ssl);
  if (!current || SSL_SESSION_is_resumable(current) != 1) return nullptr;
  // A copy: a connection closed without close_notify (as pooled connections
  // are) marks its own session not resumable when it is freed.
  SSL_SESSION* copy = SSL_SESSION_dup(current);
  if (!copy) return nullptr;
  return TlsSessionRef(copy, SSL_SESSION_free);
}

}  // namespace sluice
