#include "middleware/ratelimit/audit/top_endpoint.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <boost/asio/post.hpp>

#include "common/query_params.hpp"
#include "gateway/config/rls_config.hpp"
#include "gateway/metrics.hpp"
#include "middleware/ratelimit/audit/denial_audit.hpp"

namespace sluice {
namespace {

namespace http = boost::beast::http;

constexpr std::string_view kTopPath = "/ratelimit/top";
constexpr std::string_view kTopRequests = "sluice_admin_top_requests_total";
constexpr std::size_t kMaxN = kTopKept;  // a slot set keeps no more

// A whole number from `lo` to `hi`, written in digits only.
std::optional<std::int64_t> bounded_integer(const std::string& text, std::int64_t lo,
                                            std::int64_t hi) {
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [at, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || at != end || text[0] == '-' || text[0] == '+') {
    return std::nullopt;
  }
  if (value < lo || value > hi) return std::nullopt;
  return value;
}

std::string_view result_label(unsigned status) {
  return status == 200 ? "ok" : status == 400 ? "bad_request" : "unavailable";
}

}  // namespace

std::variant<TopQuery, TopQueryError> parse_top_query(std::string_view query,
                                                      const Config& config) {
  for (const auto name : {"limit", "window_s", "n"}) {
    if (query_param_count(query, name) > 1) {
      return TopQueryError{std::string("the parameter ") + name + " is given more than once"};
    }
  }
  TopQuery out;
  auto limit = query_param(query, "limit");
  if (!limit || limit->empty()) return TopQueryError{"the parameter limit is required"};
  const bool known = std::any_of(config.limits.begin(), config.limits.end(),
                                 [&](const LimitConfig& l) { return l.name == *limit; }) ||
                     (config.rls && config.rls->has_limited_rule(*limit));
  if (!known) return TopQueryError{"no limit of that name is configured"};
  out.limit = std::move(*limit);
  if (auto text = query_param(query, "window_s")) {
    auto window = bounded_integer(*text, 1, kTopMaxWindowSeconds);
    if (!window) {
      return TopQueryError{"window_s must be a whole number of seconds from 1 to " +
                           std::to_string(kTopMaxWindowSeconds)};
    }
    out.window_s = *window;
  }
  if (auto text = query_param(query, "n")) {
    auto n = bounded_integer(*text, 1, static_cast<std::int64_t>(kMaxN));
    if (!n) return TopQueryError{"n must be a whole number from 1 to " + std::to_string(kMaxN)};
    out.n = static_cast<std::size_t>(*n);
  }
  return out;
}

void seed_top_api_metrics(MetricsShard& metrics) {
  for (const auto status : {200u, 400u, 503u}) {
    metrics.declare(kTopRequests, scratch_labels({{"result", result_label(status)}}));
  }
}

void add_top_endpoint(AdminRoutes& routes, std::shared_ptr<TopWorkers> workers) {
  routes.add(
      std::string(kTopPath),
      [workers = std::move(workers)](const AdminCall& call, AdminReply reply) {
        std::size_t chosen = 0;
        auto entries = workers->live(chosen);
        if (entries.empty()) return reply(problem_response(503, "no worker is serving"));
        const std::string_view target = call.request.target();
        const auto mark = target.find('?');
        std::string query(mark == std::string_view::npos ? std::string_view{}
                                                         : target.substr(mark + 1));
        boost::asio::post(entries[chosen].executor, [weak = entries[chosen].worker,
                                                     query = std::move(query),
                                                     reply = std::make_shared<ReplyOnce>(
                                                         std::move(reply))] {
          auto worker = weak.lock();
          if (!worker) return (*reply)(problem_response(503, "the worker stopped"));
          auto answer = [worker, reply](unsigned status, AdminResponse res) {
            worker->metrics->add(kTopRequests, scratch_labels({{"result", result_label(status)}}));
            (*reply)(std::move(res));
          };
          auto parsed = parse_top_query(query, **worker->config);
          if (auto* bad = std::get_if<TopQueryError>(&parsed)) {
            return answer(400, problem_response(400, bad->detail));
          }
          auto q = std::get<TopQuery>(std::move(parsed));
          worker->audit->top(
              q.limit, q.window_s, q.n,
              [answer, q](std::error_code ec, std::vector<TopEntry> top) {
                if (ec) {
                  return answer(503, problem_response(503, "Redis did not answer: " + ec.message()));
                }
                nlohmann::ordered_json keys = nlohmann::ordered_json::array();
                for (const auto& e : top) {
                  keys.push_back({{"key", e.caller},
                                  {"denials", static_cast<std::int64_t>(std::llround(e.denials))}});
                }
                answer(200, json_response(http::status::ok, {{"limit", q.limit},
                                                             {"window_s", q.window_s},
                                                             {"keys", std::move(keys)}}));
              });
        });
      },
      {http::verb::get, http::verb::head}, AdminMatch::kExact, AdminGuard::kProtected);
}

}  // namespace sluice
