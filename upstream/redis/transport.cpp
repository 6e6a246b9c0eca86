#include "upstream/redis/transport.hpp"

#include <openssl/ssl.h>

#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>

#include "common/ip_literal.hpp"

namespace sluice::redis {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;

std::shared_ptr<ssl::context> make_tls_context(const Options& opts, std::string& error) {
  if (!opts.tls) return nullptr;
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  boost::system::error_code ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1,
                   ec);
  if (opts.ca_file.empty()) {
    ctx->set_default_verify_paths(ec);
    if (ec) error = "default CA store: " + ec.message();
  } else {
    ctx->load_verify_file(opts.ca_file, ec);
    if (ec) error = "CA file " + opts.ca_file + ": " + ec.message();
  }
  if (error.empty() && !opts.cert_file.empty()) {
    ctx->use_certificate_chain_file(opts.cert_file, ec);
    if (ec) error = "certificate file " + opts.cert_file + ": " + ec.message();
  }
  if (error.empty() && !opts.cert_file.empty()) {
    const std::string& key = opts.key_file.empty() ? opts.cert_file : opts.key_file;
    ctx->use_private_key_file(key, ssl::context::pem, ec);
    if (ec) error = "key file " + key + ": " + ec.message();
  }
  return ctx;
}

bool is_tls_error(const boost::system::error_code& ec) {
  return ec.category() == asio::error::get_ssl_category() ||
         ec.category() == ssl::error::get_stream_category();
}

Stream::Stream(const asio::any_io_executor& executor, std::shared_ptr<ssl::context> tls_context)
    : tls_context_(std::move(tls_context)) {
  if (tls_context_) {
    tls_.emplace(executor, *tls_context_);
  } else {
    plain_.emplace(executor);
  }
}

boost::system::error_code Stream::prepare_tls(const std::string& verify_name) {
  // SNI carries names only, never an address; c_str(): the name as OpenSSL reads it.
  if (!is_ip_address(verify_name.c_str())) {
    SSL_set_tlsext_host_name(tls_->native_handle(), verify_name.c_str());
  }
  boost::system::error_code ec;
  tls_->set_verify_mode(ssl::verify_peer, ec);
  if (!ec) tls_->set_verify_callback(ssl::host_name_verification(verify_name), ec);
  return ec;
}

void Stream::close() {
  boost::system::error_code ignored;
  socket().close(ignored);
}

}  // namespace sluice::redis
