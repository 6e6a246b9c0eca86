// TLS to one upstream (upstreams.NAME.tls): the client context every
// connection to its servers is made with (the CA that verifies them, an
// optional client certificate for mutual TLS, the lowest version), the name
// sent as SNI and checked against their certificates, and the sessions kept
// per server so that a new connection resumes rather than repeats a full
// handshake. The context is built once per configuration (load, --check and
// reload fail on the same bad files) and shared read-only by the workers.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

using SSL = struct ssl_st;
using SSL_CTX = struct ssl_ctx_st;
using SSL_SESSION = struct ssl_session_st;

namespace sluice {

struct UpstreamTlsConfig {
  std::string ca_file;           // empty: the system's trusted CAs
  std::string server_name;       // empty: each server's host (an IP address: no SNI)
  std::string certificate_file;  // with key_file: a client certificate (mTLS)
  std::string key_file;
  int min_version = 12;  // 12 (TLS 1.2) or 13
  bool operator==(const UpstreamTlsConfig&) const = default;
};

class UpstreamTls {
 public:
  // The context of `config`, or null with `error` saying which file or
  // setting OpenSSL refused.
  static std::shared_ptr<const UpstreamTls> build(const UpstreamTlsConfig& config,
                                                  std::string& error);
  ~UpstreamTls();
  UpstreamTls(const UpstreamTls&) = delete;
  UpstreamTls& operator=(const UpstreamTls&) = delete;

  SSL_CTX* context() const { return context_; }
  const UpstreamTlsConfig& config() const { return config_; }

  // Whether two contexts were built from the same settings and the same
  // files (each file's device, inode, size and modification time as they
  // were when it was read): a reload that changed neither rebuilds the
  // context, and its connections and sessions carry over to the new one.
  static bool same(const UpstreamTls* a, const UpstreamTls* b) {
    return a == b || (a && b && a->fingerprint_ == b->fingerprint_);
  }

  // Prepares a client connection `ssl` to a server whose host is `host`:
  // SNI and the name its certificate must hold (server_name, else `host`; an
  // IP address is checked against the certificate's IP addresses and sent
  // without SNI), and `resume`, a session of an earlier connection (may be
  // null). `h2`: ALPN offers h2 only (an HTTP/2 upstream). False when the
  // name cannot be checked: no handshake may start then.
  bool prepare(SSL* ssl, const std::string& host, SSL_SESSION* resume, bool h2 = false) const;
  // The connection's peer chose h2 by ALPN.
  static bool negotiated_h2(SSL* ssl);

  // Why a handshake failed, for the log: the certificate verification's
  // reason when that is what failed, else `fallback`.
  static std::string failure_reason(SSL* ssl, const std::string& fallback);

 private:
  UpstreamTls() = default;
  SSL_CTX* context_ = nullptr;
  UpstreamTlsConfig config_;
  std::array<std::uint64_t, 4> fingerprint_{};  // SHA-256 of the settings and file identities
};

// A session an upstream connection may resume, shared by owner.
using TlsSessionRef = std::shared_ptr<SSL_SESSION>;
// The session of `ssl`'s connection if it can be resumed, else null.
TlsSessionRef resumable_session(SSL* ssl);

}  // namespace sluice
