#include "upstream/redis/codec.hpp"

#include <hiredis/hiredis.h>
#include <openssl/evp.h>

#include "gateway/common/hex.hpp"

namespace sluice::redis {

std::string script_sha1(std::string_view body) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(body.data(), body.size(), digest, &len, EVP_sha1(), nullptr);
  return hex::encode(std::span<const unsigned char>(digest, len));
}

Script::Script(std::string body)
    : body_(std::make_shared<const std::string>(std::move(body))), sha1_(script_sha1(*body_)) {}

bool CommandEncoder::append_to(std::string& out) {
  char* cmd = nullptr;
  const int len = argv_.empty() ? -1
                                : redisFormatCommandArgv(&cmd, static_cast<int>(argv_.size()),
                                                         argv_.data(), lens_.data());
  argv_.clear();
  lens_.clear();
  if (len < 0 || cmd == nullptr) return false;
  out.append(cmd, static_cast<std::size_t>(len));
  redisFreeCommand(cmd);
  return true;
}

}  // namespace sluice::redis
