// The bucket API on the admin listener: GET /ratelimit/buckets/{limit}?value=…
// shows a bucket, DELETE resets it (bucket_request.hpp reads the request and
// names the bucket). The admin handler runs on the main thread and owns
// nothing of the workers: it posts the request to one worker, which names
// the bucket under the configuration it has in force and asks its limiter;
// a DELETE then has every other worker forget the bucket locally (its denial
// and its lease). The answer is handed to the admin reply from a worker's
// thread (the admin server writes it on its own). Protected endpoints
// (admin_access.hpp). Counted per worker as
// sluice_admin_bucket_requests_total{method,result}.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include "gateway/admin/admin_routes.hpp"
#include "gateway/config/config.hpp"
#include "middleware/ratelimit/admin/worker_registry.hpp"

namespace sluice {

class ConsumerResolver;
class LocalLayer;
class MetricsShard;
class DenialAudit;

// What the bucket API uses of one worker; read and called on that worker's
// executor only. Every part outlives it while the worker's loop runs.
struct BucketWorker {
  const std::shared_ptr<const Config>* config;  // the worker's configuration in force
  std::shared_ptr<LocalLayer> layer;            // the worker's limiter, in front of Redis
  MetricsShard* metrics;                        // the worker's shard
  // The worker's way to the consumer store: a store consumer's API key names
  // its consumer's bucket, as a request carrying it would.
  std::shared_ptr<ConsumerResolver> consumers;
  // The worker's denial stream and most-limited view (the Envoy rate-limit
  // service notes its denials there too).
  std::shared_ptr<DenialAudit> audit;
};

// The workers of the process, for the bucket API.
using BucketWorkers = WorkerRegistry<BucketWorker>;

// Declares a zero series of sluice_admin_bucket_requests_total for every
// method and result.
void seed_bucket_api_metrics(MetricsShard& metrics);

// Adds GET, HEAD and DELETE under /ratelimit/buckets/ to `routes`.
void add_bucket_endpoints(AdminRoutes& routes, std::shared_ptr<BucketWorkers> workers);

}  // namespace sluice
