// The version of this build: what `sluice --version` prints and what the
// version label of sluice_build_info carries (one source for both).
#pragma once

#include <string_view>

namespace sluice {

std::string_view version() noexcept;

}  // namespace sluice
