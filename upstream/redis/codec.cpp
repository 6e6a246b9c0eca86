#include "upstream/redis/codec.hpp"

#include <openssl/evp.h>

#include "common/decimal.hpp"
#include "common/hex.hpp"

namespace sluice::redis {

std::string script_sha1(std::string_view body) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(body.data(), body.size(), digest, &len, EVP_sha1(), nullptr);
  return hex::encode(std::span<const unsigned char>(digest, len));
}

Script::Script(std::string body)
    : body_(std::make_shared<const std::string>(std::move(body))), sha1_(script_sha1(*body_)) {}

namespace {

// "<prefix><n>\r\n": a RESP array or bulk string header.
void append_header(std::string& out, char prefix, std::size_t n) {
  char text[24];
  char* const end = text + sizeof text;
  end[-2] = '\r';
  end[-1] = '\n';
  char* p = put_decimal_before(end - 2, n);
  *--p = prefix;
  out.append(p, static_cast<std::size_t>(end - p));
}

}  // namespace

// The RESP array of bulk strings, written straight into `out` (what hiredis'
// redisFormatCommandArgv writes, without its buffer of its own).
bool CommandEncoder::append_to(std::string& out) {
  if (argv_.empty()) return false;
  append_header(out, '*', argv_.size());
  for (std::size_t i = 0; i < argv_.size(); ++i) {
    append_header(out, '$', lens_[i]);
    out.append(argv_[i], lens_[i]);
    out += "\r\n";
  }
  argv_.clear();
  lens_.clear();
  return true;
}

}  // namespace sluice::redis
