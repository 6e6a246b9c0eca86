// The middleware side of composition: a WorkerServicesFactory whose services
// give each worker the access log, the rate-limit middleware and the worker's
// own Redis rate limiter (its own connection, on that worker's executor).
// The gateway sees them only as WorkerServices.
#pragma once

#include <memory>

#include "gateway/worker_services.hpp"

namespace sluice {

class BucketWorkers;

// With `buckets`, every worker's services register there for the bucket API
// (middleware/ratelimit/admin/bucket_endpoint.hpp).
std::shared_ptr<WorkerServicesFactory> make_middleware_services(
    std::shared_ptr<BucketWorkers> buckets = nullptr);

}  // namespace sluice
