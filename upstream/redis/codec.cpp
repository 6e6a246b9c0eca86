#include "upstream/redis/codec.hpp"

#include <charconv>

#include <openssl/evp.h>

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
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
  out += prefix;
  out.append(digits, end);
  out += "\r\n";
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
