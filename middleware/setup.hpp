// The middleware side of composition: a WorkerServicesFactory whose services
// give each worker the access log, the rate-limit middleware and the worker's
// own Redis rate limiter (its own connection, on that worker's executor).
// The gateway sees them only as WorkerServices.
#pragma once

#include <memory>

#include "gateway/worker_services.hpp"

namespace sluice {

template <typename Worker>
class WorkerRegistry;
struct BucketWorker;
class ConsumerWorker;
struct TopWorker;
using BucketWorkers = WorkerRegistry<BucketWorker>;
using ConsumerWorkers = WorkerRegistry<ConsumerWorker>;
using TopWorkers = WorkerRegistry<TopWorker>;

// Where the admin API finds the workers: with `buckets`, every worker's
// services register there for the bucket API
// (middleware/ratelimit/admin/bucket_endpoint.hpp), with `consumers` for the
// consumer API (middleware/ratelimit/consumers/consumer_endpoint.hpp), with
// `top` for the most-limited view (middleware/ratelimit/audit/top_endpoint.hpp).
struct AdminRegistries {
  std::shared_ptr<BucketWorkers> buckets;
  std::shared_ptr<ConsumerWorkers> consumers;
  std::shared_ptr<TopWorkers> top;
};

std::shared_ptr<WorkerServicesFactory> make_middleware_services(AdminRegistries registries = {});

}  // namespace sluice
