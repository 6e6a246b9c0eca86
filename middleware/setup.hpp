// Wires the concrete middleware (rate limiting and its Redis limiter) into the
// gateway through ApplicationHooks, so that gateway/ never depends on them.
#pragma once

#include <memory>

#include "gateway/application.hpp"
#include "gateway/config/config.hpp"

namespace sluice {

ApplicationHooks make_middleware_hooks(const std::shared_ptr<const Config>& config);

}  // namespace sluice
