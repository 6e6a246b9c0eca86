// The middleware side of composition: a WorkerServicesFactory whose services
// give each worker the access log, the rate-limit middleware and the worker's
// own Redis rate limiter (its own connection, on that worker's executor).
// The gateway sees them only as WorkerServices.
#pragma once

#include <memory>

#include "gateway/worker_services.hpp"

namespace sluice {

std::shared_ptr<WorkerServicesFactory> make_middleware_services();

}  // namespace sluice
