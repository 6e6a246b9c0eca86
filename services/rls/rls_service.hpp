// The Envoy rate-limit service as the application's listener on rls.listen:
// each accepted connection is served on its worker (rls_connection.hpp) with
// that worker's limiter, found among the workers of the bucket API.
// Composed in main.cpp, like the admin endpoints.
#pragma once

#include <memory>

#include "gateway/application.hpp"
#include "middleware/setup.hpp"

namespace sluice {

ServiceListener rls_listener(std::shared_ptr<BucketWorkers> workers);

}  // namespace sluice
