// The consumer API on the admin listener (protected, as the bucket API):
//   PUT    /consumers/{id}   create (201) or replace (200) from a JSON body
//   GET    /consumers/{id}   the consumer (keys as fingerprints only), or 404
//   DELETE /consumers/{id}   204, or 404
//   GET    /consumers?plan=P&cursor=C&count=N   a page, in id order
// A request is posted to one worker, which asks the store on its own
// connection; a change is then forgotten by every worker's cache of this
// instance at once (other instances hear the store's change event). Bad input
// gets 400 problem+json naming the field; no store (api_keys.store is not
// redis) or Redis not answering, 503. Each change is logged with the token's
// fingerprint, never a key. Counted per worker as
// sluice_admin_consumer_requests_total{method,result}.
#pragma once

#include <memory>

#include "gateway/admin/admin_routes.hpp"
#include "middleware/ratelimit/consumers/consumer_worker.hpp"

namespace sluice {

class MetricsShard;

// Declares a zero series of sluice_admin_consumer_requests_total for every
// method and result.
void seed_consumer_api_metrics(MetricsShard& metrics);

void add_consumer_endpoints(AdminRoutes& routes, std::shared_ptr<ConsumerWorkers> workers);

}  // namespace sluice
