#include "middleware/ratelimit/admin/bucket_endpoint.hpp"

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/admin/admin_caller.hpp"
#include "middleware/ratelimit/admin/bucket_request.hpp"
#include "middleware/ratelimit/consumers/consumer_resolver.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/local/local_layer.hpp"

namespace sluice {
namespace {

namespace http = boost::beast::http;

constexpr std::string_view kBucketRequests = "sluice_admin_bucket_requests_total";

void respond(ReplyOnce& reply, unsigned status, const nlohmann::ordered_json& document) {
  if (status == 204) {
    return reply(admin_response(http::status::no_content, "application/json", ""));
  }
  reply(json_response(static_cast<http::status>(status), document));
}

// One request on the chosen worker: what it answers and counts.
struct BucketCall {
  std::shared_ptr<BucketWorker> worker;
  std::vector<BucketWorkers::Entry> others;  // every other live worker
  bool is_delete = false;
  std::string caller;  // for the log of a reset
  std::shared_ptr<ReplyOnce> reply;

  // Counted on the chosen worker, whose metrics shard this is.
  void count(unsigned status) const {
    worker->metrics->add(
        "sluice_admin_bucket_requests_total",
        labels("method", is_delete ? "DELETE" : "GET", "result", admin_result_label(status)));
  }

  void answer(unsigned status, const nlohmann::ordered_json& document) const {
    count(status);
    respond(*reply, status, document);
  }

  bool worker_has_secret() const { return !(*worker->config)->redis.key_secret.empty(); }

  void fail(unsigned status, const std::string& message) const {
    answer(status, {{"error", message}});
  }

  void serve(std::string_view target) const {
    auto query = parse_bucket_target(target);
    if (auto* error = std::get_if<BucketRequestError>(&query)) {
      return fail(error->status, error->message);
    }
    locate(std::make_shared<BucketQuery>(std::get<BucketQuery>(std::move(query))), std::nullopt);
  }

  // Names the bucket, asking the consumer store first when it holds the key.
  void locate(const std::shared_ptr<BucketQuery>& query,
              const std::optional<std::shared_ptr<const StoredConsumer>>& stored) const {
    auto found = find_bucket(**worker->config, *query, stored);
    if (auto* error = std::get_if<BucketRequestError>(&found)) {
      return fail(error->status, error->message);
    }
    if (auto* question = std::get_if<StoreQuestion>(&found)) {
      auto resolved = [call = *this, query](Resolution answer) {
        if (answer.error) return call.fail(503, "the consumer store did not answer");
        call.locate(query, std::move(answer.consumer));
      };
      if (auto cached = worker->consumers->cached(question->key)) {
        return resolved(std::move(*cached));
      }
      return worker->consumers->lookup(question->key, std::move(resolved));
    }
    act(std::make_shared<BucketTarget>(std::get<BucketTarget>(std::move(found))));
  }

  // Shows or resets the bucket.
  void act(const std::shared_ptr<BucketTarget>& bucket) const {
    if (!is_delete) {
      return worker->layer->inspect(
          bucket->descriptor, [call = *this, bucket](std::error_code ec, BucketView view) {
            if (ec) return call.fail(503, "the store could not read the bucket: " + ec.message());
            call.answer(200, bucket_document(*bucket, view));
          });
    }
    worker->layer->reset(bucket->descriptor, [call = *this, bucket](std::error_code ec) {
      if (ec) return call.fail(503, "the store could not reset the bucket: " + ec.message());
      // Without a key secret the bucket's name is a plain hash of the key
      // value (reversible for IP addresses): the limit's name only, then.
      if (call.worker_has_secret()) {
        spdlog::info("admin: bucket {} reset ({})", bucket_name(bucket->descriptor), call.caller);
      } else {
        spdlog::info("admin: a bucket of limit {} reset ({})", bucket->descriptor.limit,
                     call.caller);
      }
      call.forget_elsewhere(bucket);
    });
  }

  // Every other worker drops its denial and lease of the bucket; the last one
  // to do so answers. What travels to the other workers holds nothing of
  // this worker (its layer, its metrics): a handler that never runs, because
  // that worker stopped first, is destroyed there safely.
  void forget_elsewhere(const std::shared_ptr<BucketTarget>& bucket) const {
    count(204);
    if (others.empty()) return respond(*reply, 204, {});
    auto pending = std::make_shared<std::atomic<std::size_t>>(others.size());
    for (const auto& entry : others) {
      boost::asio::post(entry.executor, [reply = reply, weak = entry.worker, bucket, pending] {
        if (auto other = weak.lock()) other->layer->forget(bucket->descriptor);
        if (pending->fetch_sub(1) == 1) respond(*reply, 204, {});
      });
    }
  }
};

}  // namespace

void seed_bucket_api_metrics(MetricsShard& metrics) {
  for (const char* method : {"GET", "DELETE"}) {
    for (const unsigned status : {200u, 400u, 404u, 503u}) {
      metrics.declare(kBucketRequests,
                      labels("method", method, "result", admin_result_label(status)));
    }
  }
}

void add_bucket_endpoints(AdminRoutes& routes, std::shared_ptr<BucketWorkers> workers) {
  routes.add(
      std::string(kBucketsPath),
      [workers = std::move(workers)](const AdminCall& call, AdminReply reply) {
        const AdminRequest& request = call.request;
        std::size_t chosen = 0;
        auto entries = workers->live(chosen);
        if (entries.empty()) {
          return reply(json_response(http::status::service_unavailable,
                                     {{"error", "no worker is serving"}}));
        }
        const auto entry = entries[chosen];
        entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(chosen));
        boost::asio::post(entry.executor, [weak = entry.worker, others = std::move(entries),
                                           target = std::string(request.target()),
                                           is_delete = request.method() == http::verb::delete_,
                                           caller = admin_caller(call),
                                           reply = std::make_shared<ReplyOnce>(std::move(reply))] {
          auto worker = weak.lock();
          if (!worker) {
            return (*reply)(json_response(http::status::service_unavailable,
                                          {{"error", "the worker stopped"}}));
          }
          BucketCall{std::move(worker), others, is_delete, caller, reply}.serve(target);
        });
      },
      {http::verb::get, http::verb::head, http::verb::delete_}, AdminMatch::kPrefix,
      AdminGuard::kProtected);
}

}  // namespace sluice
