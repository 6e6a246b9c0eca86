#include "middleware/ratelimit/consumers/consumer_endpoint.hpp"

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "common/query_params.hpp"
#include "common/target_parts.hpp"
#include "gateway/config/text.hpp"
#include "gateway/metrics.hpp"
#include "middleware/ratelimit/admin/admin_caller.hpp"

namespace sluice {
namespace {

namespace http = boost::beast::http;

constexpr std::string_view kConsumersPath = "/consumers";
constexpr std::string_view kConsumerPrefix = "/consumers/";
constexpr std::string_view kRequests = "sluice_admin_consumer_requests_total";
constexpr std::size_t kDefaultPage = 100;
constexpr std::size_t kMaxPage = 1000;

struct ConsumerCall {
  std::shared_ptr<ConsumerWorker> worker;
  std::vector<ConsumerWorkers::Entry> others;
  http::verb method;
  std::string target;
  std::string body;
  std::string caller;
  std::shared_ptr<ReplyOnce> reply;

  std::string_view method_label() const {
    switch (method) {
      case http::verb::put:
        return "PUT";
      case http::verb::delete_:
        return "DELETE";
      default:
        return "GET";
    }
  }

  void count(unsigned status) const {
    worker->metrics().add(kRequests,
                          labels("method", method_label(), "result", admin_result_label(status)));
  }

  void answer(unsigned status, const nlohmann::ordered_json& document) const {
    count(status);
    if (status == 204) {
      return (*reply)(admin_response(http::status::no_content, "application/json", ""));
    }
    (*reply)(json_response(static_cast<http::status>(status), document));
  }

  void problem(unsigned status, const std::string& detail, const std::string& field = {}) const {
    count(status);
    (*reply)(problem_response(status, detail, field));
  }

  // Every worker of this instance forgets these keys; then `then` runs here.
  void forget_everywhere(const std::vector<std::string>& changed) const {
    for (const auto& fingerprint : changed) worker->resolver()->forget(fingerprint);
    for (const auto& entry : others) {
      boost::asio::post(entry.executor, [weak = entry.worker, changed] {
        if (auto other = weak.lock()) {
          for (const auto& fingerprint : changed) other->resolver()->forget(fingerprint);
        }
      });
    }
  }

  void serve() const {
    ConsumerStore* store = worker->store();
    if (!store) return problem(503, "the consumer store is off (api_keys.store is not redis)");
    const auto parts = split_target(target);
    if (parts.path == kConsumersPath) return list(*store, parts.query);
    const std::string id(parts.path.substr(kConsumerPrefix.size()));
    if (auto why = config::consumer_id_problem(id)) return problem(400, *why, "id");
    switch (method) {
      case http::verb::put:
        return put(*store, id);
      case http::verb::delete_:
        return remove(*store, id);
      default:
        return get(*store, id);
    }
  }

  void put(ConsumerStore& store, const std::string& id) const {
    auto read = read_consumer_body(body, worker->config(), id);
    if (auto* bad = std::get_if<BodyProblem>(&read)) return problem(400, bad->detail, bad->field);
    auto consumer = std::make_shared<StoredConsumer>(std::get<StoredConsumer>(std::move(read)));
    store.put(*consumer, [call = *this, consumer](ConsumerWrite write) {
      using Result = ConsumerWrite::Result;
      switch (write.result) {
        case Result::kConflict:
          return call.problem(400, "held by another consumer",
                              "keys[" + std::to_string(write.conflict_index) + "]");
        case Result::kError:
          return call.problem(503, "the consumer store did not answer: " + write.error);
        case Result::kUnknown:
          return call.problem(503, "the consumer store did not answer (" + write.error +
                                       "); the write may have been applied: PUT it again");
        case Result::kCreated:
        case Result::kReplaced:
          spdlog::info("admin: consumer {} {} (plan {}, {} keys, {})", consumer->id,
                       write.result == Result::kCreated ? "created" : "replaced", consumer->plan,
                       consumer->key_fingerprints.size(), call.caller);
          call.forget_everywhere(write.changed);
          break;
        case Result::kUnchanged:
          break;
      }
      consumer->updated_at_ms = write.updated_at_ms;
      call.answer(write.result == Result::kCreated ? 201 : 200, consumer_json(*consumer));
    });
  }

  void get(ConsumerStore& store, const std::string& id) const {
    store.read(id, [call = *this](ConsumerRead read) {
      switch (read.result) {
        case ConsumerRead::Result::kFound:
          return call.answer(200, consumer_json(*read.consumer));
        case ConsumerRead::Result::kNotFound:
          return call.problem(404, "no consumer of that id");
        case ConsumerRead::Result::kDamaged:
          return call.problem(503, "the consumer's record in Redis is not one Sluice wrote");
        case ConsumerRead::Result::kError:
          break;
      }
      call.problem(503, "the consumer store did not answer: " + read.error);
    });
  }

  void remove(ConsumerStore& store, const std::string& id) const {
    store.remove(id, [call = *this, id](ConsumerRemoval removal) {
      if (!removal.ok) return call.problem(503, "the consumer store did not answer: " + removal.error);
      if (!removal.existed) return call.problem(404, "no consumer of that id");
      spdlog::info("admin: consumer {} deleted ({})", id, call.caller);
      call.forget_everywhere(removal.changed);
      call.answer(204, {});
    });
  }

  void list(ConsumerStore& store, std::string_view query) const {
    std::size_t count = kDefaultPage;
    if (auto given = query_param(query, "count")) {
      const auto n = std::atoll(given->c_str());
      if (n < 1 || n > static_cast<long long>(kMaxPage) ||
          given->find_first_not_of("0123456789") != std::string::npos) {
        return problem(400, "a whole number from 1 to 1000", "count");
      }
      count = static_cast<std::size_t>(n);
    }
    const std::string plan = query_param(query, "plan").value_or("");
    if (!plan.empty() && !is_known_plan(worker->config(), plan)) {
      return problem(400, "unknown plan", "plan");
    }
    const std::string org = query_param(query, "org").value_or("");
    if (!org.empty() && !plan.empty()) return problem(400, "one of plan or org", "org");
    if (!org.empty() && config::consumer_id_problem(org)) {
      return problem(400, "not an organisation name", "org");
    }
    const std::string cursor = query_param(query, "cursor").value_or("");
    if (!cursor.empty() && config::consumer_id_problem(cursor)) {
      return problem(400, "not a cursor this API gave", "cursor");
    }
    store.list(plan, org, cursor, count, [call = *this](ConsumerPage page) {
      if (!page.ok) return call.problem(503, "the consumer store did not answer: " + page.error);
      nlohmann::ordered_json consumers = nlohmann::ordered_json::array();
      for (const auto& consumer : page.consumers) consumers.push_back(consumer_json(consumer));
      call.answer(200, {{"consumers", std::move(consumers)}, {"next_cursor", page.next_cursor}});
    });
  }
};

void dispatch(const std::shared_ptr<ConsumerWorkers>& workers, const AdminCall& call,
              AdminReply reply) {
  const AdminRequest& request = call.request;
  std::size_t chosen = 0;
  auto entries = workers->live(chosen);
  if (entries.empty()) {
    return reply(
        json_response(http::status::service_unavailable, {{"error", "no worker is serving"}}));
  }
  const auto entry = entries[chosen];
  entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(chosen));
  boost::asio::post(entry.executor, [weak = entry.worker, others = std::move(entries),
                                     method = request.method(),
                                     target = std::string(request.target()), body = request.body(),
                                     caller = admin_caller(call),
                                     reply = std::make_shared<ReplyOnce>(std::move(reply))] {
    auto worker = weak.lock();
    if (!worker) {
      return (*reply)(
          json_response(http::status::service_unavailable, {{"error", "the worker stopped"}}));
    }
    ConsumerCall{std::move(worker), others, method, target, body, caller, reply}.serve();
  });
}

}  // namespace

void seed_consumer_api_metrics(MetricsShard& metrics) {
  for (const char* method : {"GET", "PUT", "DELETE"}) {
    for (const unsigned status : {200u, 400u, 404u, 503u}) {
      metrics.declare(kRequests, labels("method", method, "result", admin_result_label(status)));
    }
  }
}

void add_consumer_endpoints(AdminRoutes& routes, std::shared_ptr<ConsumerWorkers> workers) {
  auto handler = [workers = std::move(workers)](const AdminCall& call, AdminReply reply) {
    dispatch(workers, call, std::move(reply));
  };
  routes.add(std::string(kConsumersPath), handler, {http::verb::get, http::verb::head},
             AdminMatch::kExact, AdminGuard::kProtected);
  routes.add(std::string(kConsumerPrefix), handler,
             {http::verb::get, http::verb::head, http::verb::put, http::verb::delete_},
             AdminMatch::kPrefix, AdminGuard::kProtected, "application/json");
}

}  // namespace sluice
