// One header field as libnghttp2 takes it (nghttp2 copies name and value), for
// both HTTP/2 sides: the client session's streams and the upstream connection.
#pragma once

#include <cstdint>
#include <string>

#include <nghttp2/nghttp2.h>

namespace sluice {

inline nghttp2_nv h2_nv(const std::string& name, const std::string& value) {
  return {reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(),
          value.size(), NGHTTP2_NV_FLAG_NONE};
}

}  // namespace sluice
