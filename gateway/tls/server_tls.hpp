// The TLS side of the data listener: the server contexts built from
// server.tls (a default certificate and more chosen by SNI), with ALPN
// http/1.1, session resumption (tickets sealed with rotating keys, and a
// session cache, both bound to the SNI name), cipher lists and a minimum
// protocol version. Built on the main thread at load or reload; shared
// read-only by every worker's connections afterwards (OpenSSL contexts are
// safe to use from many threads), and kept alive by them.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace boost::asio::ssl {
class context;
}

namespace sluice {

struct TlsConfig;
class TicketKeys;

class ServerTls {
 public:
  // The contexts for `config`'s certificates; nullptr, with `error` saying
  // which file and why, when a file does not load or a key does not match its
  // certificate.
  static std::shared_ptr<ServerTls> build(const TlsConfig& config, std::string& error);

  ServerTls();
  ~ServerTls();
  ServerTls(const ServerTls&) = delete;
  ServerTls& operator=(const ServerTls&) = delete;

  // The context a connection starts with; the SNI callback switches from it.
  boost::asio::ssl::context& context() const;
  // The DNS names each certificate serves, lowercase, in configuration order.
  const std::vector<std::vector<std::string>>& names() const;
  // Takes over `previous`'s session-ticket keys (a reload), so that clients
  // holding a ticket from before the reload still resume and the keys rotate
  // on their schedule. Call before any connection uses these contexts.
  void keep_ticket_keys(const ServerTls& previous) const;
  // The keys that seal and open session tickets (rotated; see ticket_keys.hpp).
  TicketKeys& ticket_keys() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Which certificate serves `server_name` (the client's SNI): the first whose
// names hold it exactly, else the first with a wildcard ("*.example.com")
// covering its first label, else 0, the default. Names compare case-insensitively.
std::size_t pick_certificate(const std::vector<std::vector<std::string>>& names,
                             std::string_view server_name);

// What OpenSSL makes of a cipher list: empty when it selects at least one
// cipher, else why not. `tls13`: a TLS 1.3 suite list (SSL_CTX_set_ciphersuites),
// else a TLS 1.2 cipher string (SSL_CTX_set_cipher_list).
std::string cipher_list_error(const std::string& list, bool tls13);

// The host name of a ClientHello's server_name extension (its body, as
// OpenSSL hands it over), or an empty view when it names none or is malformed.
std::string_view server_name_of_extension(const unsigned char* data, std::size_t size);

}  // namespace sluice
