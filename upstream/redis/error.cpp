#include "upstream/redis/error.hpp"

#include <string>

namespace sluice::redis {
namespace {

class Category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "redis"; }
  std::string message(int ev) const override {
    switch (static_cast<Error>(ev)) {
      case Error::kTimeout:
        return "redis command timed out";
      case Error::kConnect:
        return "redis connect failed";
      case Error::kConnectionLost:
        return "redis connection lost";
      case Error::kProtocol:
        return "redis protocol error";
      case Error::kServer:
        return "redis error reply";
      case Error::kNoScript:
        return "redis script not loaded (NOSCRIPT)";
      case Error::kNotConnected:
        return "redis not connected";
      case Error::kTls:
        return "redis TLS error";
      case Error::kAuth:
        return "redis authentication failed";
      case Error::kClosed:
        return "redis client closed";
    }
    return "unknown redis error";
  }
};

}  // namespace

const std::error_category& category() noexcept {
  static const Category instance;
  return instance;
}

std::error_code make_error_code(Error e) noexcept {
  return {static_cast<int>(e), category()};
}

std::string_view error_kind(std::error_code ec) noexcept {
  if (ec.category() == category()) {
    switch (static_cast<Error>(ec.value())) {
      case Error::kTimeout:
        return "timeout";
      case Error::kProtocol:
        return "protocol";
      case Error::kServer:
        return "server";
      case Error::kNoScript:
        return "noscript";
      default:
        break;
    }
  }
  return "connect";
}

}  // namespace sluice::redis
