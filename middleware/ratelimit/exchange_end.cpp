// What a request the rate-limit step admitted leaves for the end of its
// exchange: the concurrency slots it took go back, and its cost is settled
// from the response. Each hook's list is a spare one (common/spares.hpp),
// given back once the hook has run.
#include "middleware/ratelimit/rate_limit_middleware.hpp"

#include <utility>
#include <vector>

#include "common/spares.hpp"
#include "middleware/ratelimit/concurrency/slot_keeper.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/local/fallback_store.hpp"
#include "middleware/ratelimit/settlement/settlement.hpp"
#include "middleware/ratelimit/usage/usage_inspector.hpp"

namespace sluice {
namespace {

// The concurrency slots an admitted request took: its concurrency limits,
// enforced or (a shadow one) sufficient.
std::vector<LimitDescriptor> slots_taken(const std::vector<LimitDescriptor>& descriptors,
                                         const RateDecision& decision) {
  auto taken = Spares<std::vector<LimitDescriptor>>::take();
  for (std::size_t i = 0; i < descriptors.size() && i < decision.limits.size(); ++i) {
    const LimitDescriptor& d = descriptors[i];
    if (d.algorithm == LimitAlgorithm::kConcurrency &&
        (!d.shadow || decision.limits[i].sufficient)) {
      taken.push_back(d);
    }
  }
  return taken;
}

}  // namespace

void RateLimitMiddleware::hold_local_slots(RequestContext& ctx,
                                           const std::vector<LimitDescriptor>& descriptors,
                                           const RateDecision& decision) {
  auto taken = slots_taken(descriptors, decision);
  if (taken.empty() || !fallback_) return keep_spare(std::move(taken));
  ctx.on_end.emplace_back(
      [fallback = fallback_, taken = std::move(taken)](const ExchangeEnd&) mutable {
        fallback->release_slots(taken);
        keep_spare(std::move(taken));
      });
}

void RateLimitMiddleware::hold_slots(RequestContext& ctx,
                                     const std::vector<LimitDescriptor>& descriptors,
                                     const RateDecision& decision) {
  auto taken = slots_taken(descriptors, decision);
  if (taken.empty()) return keep_spare(std::move(taken));
  slots_->hold(taken);
  ctx.on_end.emplace_back([slots = slots_, taken = std::move(taken)](const ExchangeEnd&) mutable {
    slots->release(taken);
    keep_spare(std::move(taken));
  });
}

void RateLimitMiddleware::settle_at_end(RequestContext& ctx,
                                        const std::vector<LimitDescriptor>& descriptors,
                                        const RateDecision& decision, double cost) {
  auto debited = Spares<std::vector<LimitDescriptor>>::take();
  append_debited(debited, descriptors, decision);
  const CostFromResponse& settle = ctx.route->cost_from_response;
  usage::UsageInspector* inspector = nullptr;
  if (settle.body) {
    // The exchange shows it the response body; the context keeps it until
    // the next request begins, after this hook has run.
    auto made = std::make_unique<usage::UsageInspector>(*settle.body, settle.max_inspect_bytes);
    inspector = made.get();
    ctx.response_observer = std::move(made);
  }
  // `ctx` outlives the hook (the pipeline runs it before its next request).
  ctx.on_end.emplace_back([settler = settler_, ctx = &ctx, route = ctx.route,
                           debited = std::move(debited), cost,
                           inspector](const ExchangeEnd& end) mutable {
    const CostFromResponse& settle = route->cost_from_response;
    std::optional<double> body_usage;
    if (inspector && end.status != 0 && settle.counts(end.status)) {
      const bool header_valid = end.usage && parse_usage(*end.usage);
      if (!header_valid) {
        body_usage = inspector->usage();
        settler->count_body_usage(route->name, usage::body_usage_name(inspector->outcome()));
      }
    }
    const double real = settled_cost(settle, end, cost, body_usage);
    ctx->decision.settled_cost = real;
    // A debit counts in the quota periods of now, not of the admission.
    if (real > cost) debited = with_quota_periods_now(std::move(debited), *ctx->config);
    settler->settle(route->name, debited, cost, real, settle.max_debt);
    keep_spare(std::move(debited));
  });
}

}  // namespace sluice
