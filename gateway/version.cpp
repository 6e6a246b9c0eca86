// The build's version, from the CMake project version (SLUICE_VERSION).
#include "gateway/version.hpp"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "dev"
#endif

namespace sluice {

std::string_view version() noexcept {
  return SLUICE_VERSION;
}

}  // namespace sluice
