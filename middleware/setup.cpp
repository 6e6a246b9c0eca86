#include "middleware/setup.hpp"

namespace sluice {

ApplicationHooks make_middleware_hooks(const std::shared_ptr<const Config>&) {
  ApplicationHooks hooks;
  hooks.make_chain = [](Worker&) { return MiddlewareChain{}; };
  return hooks;
}

}  // namespace sluice
