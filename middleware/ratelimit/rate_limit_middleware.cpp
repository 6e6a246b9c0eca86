#include "middleware/ratelimit/rate_limit_middleware.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <span>
#include <vector>

#include "common/ascii.hpp"
#include "common/target_parts.hpp"
#include "gateway/metrics.hpp"
#include "gateway/session/local_reply.hpp"
#include "middleware/ratelimit/api_key.hpp"
#include "middleware/ratelimit/audit/decision_fields.hpp"
#include "middleware/ratelimit/audit/denial_audit.hpp"
#include "middleware/ratelimit/consumers/consumer_resolver.hpp"
#include "middleware/ratelimit/consumers/identity_reply.hpp"
#include "middleware/ratelimit/delayed_request.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/exemptions.hpp"
#include "middleware/ratelimit/headers.hpp"
#include "middleware/ratelimit/local/fallback_store.hpp"
#include "middleware/ratelimit/metrics.hpp"
#include "middleware/ratelimit/outcome.hpp"
#include "middleware/ratelimit/reject_reply.hpp"
#include "middleware/ratelimit/request_cost.hpp"
#include "upstream/redis/error.hpp"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

// An enforced limit that admitted the request with less than a tenth of its
// capacity left.
bool near_limit(const LimitDescriptor& limit, LimitVerdict verdict, const RateDecision& decision,
                std::size_t i) {
  return verdict == LimitVerdict::kAllowed && !limit.shadow && i < decision.limits.size() &&
         decision.limits[i].remaining < 0.1 * limit.capacity;
}

// The 503 of a fail-closed route whose limiter could not decide.
LocalReply unavailable_reply(const RateDecision& decision) {
  LocalReply reply;
  reply.status = 503;
  reply.content_type = std::string{kProblemJsonContentType};
  reply.body = rate_limit_unavailable_body();
  reply.headers.emplace_back("Cache-Control", "no-store");
  reply.headers.emplace_back("Retry-After", std::to_string(unavailable_retry_after(decision)));
  return reply;
}

RequestView request_view(const RequestContext& ctx) {
  RequestView view;
  view.method = ctx.method;
  view.path = ctx.route_path;  // what the route matched: one bucket per path, however spelled
  view.query = split_target(ctx.target).query;
  view.header = ctx.header;
  view.header_count = ctx.header_count;
  view.client_ip = ctx.client_ip;
  view.route = ctx.route->name;
  if (ctx.caller.verified) view.claims = ctx.caller.claims.get();
  view.cert = ctx.client_cert;
  return view;
}

// Whether anything but the limits needs to know who the caller is.
bool identifies(const ApiKeysConfig& api_keys) {
  return !api_keys.consumers.empty() || api_keys.store == ApiKeysConfig::Store::kRedis;
}

// What the request's trace tells of the decision (DecisionRecord::traced).
void trace_decision(DecisionRecord& record, const std::vector<LimitDescriptor>& descriptors,
                    const RateDecision& decision, std::error_code ec, Clock::time_point asked,
                    Clock::time_point answered) {
  record.asked = asked;
  record.answered = answered;
  switch (decision.local) {
    case LocalDecision::kNone: record.answered_by = ec ? "none" : "redis"; break;
    case LocalDecision::kDenyCache: record.answered_by = "deny_cache"; break;
    case LocalDecision::kLease: record.answered_by = "lease"; break;
    case LocalDecision::kFallback: record.answered_by = "fallback"; break;
  }
  record.limits.clear();
  for (const auto& descriptor : descriptors) {
    if (!record.limits.empty()) record.limits += ',';
    record.limits += descriptor.limit;
  }
}

}  // namespace

long unavailable_retry_after(const RateDecision& decision) {
  const double wait = std::ceil(decision.unavailable_seconds);
  return wait >= 1 ? static_cast<long>(wait) : 1;
}

MiddlewareResult RateLimitMiddleware::on_request(RequestContext& ctx, MiddlewareLater& later) {
  const ApiKeysConfig& api_keys = ctx.config->api_keys;
  if (!route_limits(*ctx.route) && !identifies(api_keys) && !ctx.caller.verified) {
    return MiddlewareResult::next();
  }
  const RequestView view = request_view(ctx);
  Identity identity = identify(view, api_keys);
  if (needs_store(identity, api_keys) && consumers_) {
    if (auto cached = consumers_->cached(*identity.presented)) {
      apply_store_consumer(identity, std::move(cached->consumer));
    } else {
      // The lookup's callback is a std::function (copyable): the completion
      // (move-only) waits behind a shared pointer, on this path only (a
      // consumer the cache does not hold).
      auto done = std::make_shared<MiddlewareDone>(later.take());
      consumers_->lookup(*identity.presented, [self = shared_from_this(), &ctx, &later, identity,
                                               done = std::move(done)](Resolution found) mutable {
        apply_store_consumer(identity, std::move(found.consumer));
        apply_verified_caller(identity, ctx.caller);
        auto result = self->admit(ctx, request_view(ctx), identity, later, done.get());
        if (result.step != MiddlewareStep::kPending) (*done)(std::move(result.reply));
      });
      return MiddlewareResult::pending();
    }
  }
  apply_verified_caller(identity, ctx.caller);
  return admit(ctx, view, identity, later, nullptr);
}

MiddlewareResult RateLimitMiddleware::admit(RequestContext& ctx, const RequestView& view,
                                            const Identity& identity, MiddlewareLater& later,
                                            MiddlewareDone* taken) {
  const ApiKeysConfig& api_keys = ctx.config->api_keys;
  if (identity.disabled) return MiddlewareResult::respond(disabled_consumer_reply());
  if (api_keys.unknown_key == ApiKeysConfig::UnknownKey::kReject &&
      unknown_key(identity, api_keys)) {
    return MiddlewareResult::respond(unknown_key_reply(api_keys));
  }
  if (api_keys.forward_consumer && identity.consumer) {
    if (!identity.consumer_id.empty()) {
      ctx.identity_headers.emplace_back("X-Consumer-Id", std::string(identity.consumer_id));
    }
    ctx.identity_headers.emplace_back("X-Consumer-Plan", std::string(identity.plan));
  }
  // Who the caller is, for the access log (a key's fingerprint costs an HMAC:
  // only when the log is on).
  ctx.decision.plan = identity.plan;
  if (ctx.config->log.access_log || identity.stored) {
    ctx.decision.consumer = caller_label(identity, ctx.config->redis.key_secret);
  }
  const RouteConfig& route = *ctx.route;
  if (!route_limits(route)) return MiddlewareResult::next();
  const Exemption exemption = find_exemption(ctx.config->exemptions, view, identity);
  if (exemption != Exemption::kNone) {
    ctx.decision.decision = "exempt";
    // Never limited: no bucket, no Redis call, no rate-limit headers.
    metrics_.add("sluice_ratelimit_exempt_total",
                 scratch_labels({{"route", route.name}, {"reason", exemption_reason(exemption)}}));
    return MiddlewareResult::next();
  }
  // The members of the request body the route reads (read ahead of the steps).
  usage::BodyFields body_fields;
  RequestView with_body;
  const RequestView* keyed = &view;
  if (route.reads_request_body()) {
    usage::read_body_fields(ctx.request_body, route.body.fields, body_fields);
    with_body = view;
    with_body.body_fields = &body_fields;
    with_body.body_length = ctx.request_body_length;
    keyed = &with_body;
  }
  std::shared_ptr<Descriptors> held = take_descriptors();
  auto keys = build_route_descriptors(*ctx.config, route, *keyed, identity, std::move(*held));
  if (!keys.refusal) keys.refusal = check_cost_header(route, view);
  if (keys.refusal) {
    // An identity the limiter cannot key unambiguously: refused before any
    // bucket is debited, and the connection closed after the reply.
    metrics_.add("sluice_ratelimit_rejected_total",
                 scratch_labels({{"route", route.name},
                                 {"reason", refusal_reason_name(keys.refusal->reason)}}));
    LocalReply reply = make_local_reply(400, keys.refusal->message, ctx.request_id);
    reply.close_connection = true;
    return MiddlewareResult::respond(std::move(reply));
  }
  for (std::size_t i = 0; i < keys.values.size(); ++i) {
    if (keys.values[i].fell_back) {
      metrics_.add("sluice_ratelimit_missing_key_total",
                   scratch_labels({{"route", route.name},
                                   {"source", key_source_name(keys.values[i].missing_kind)}}));
    }
  }

  const double cost = request_cost(route, *keyed, keys.descriptors);
  *held = std::move(keys.descriptors);
  // A decision the limiter has at once (a lease, a remembered denial) is
  // concluded here; the others complete later, through the completion.
  // (Not on a delay route, whose decision may make the request wait, nor
  // when a store lookup took the completion already.)
  const bool at_once = !taken && route.on_limit != RouteConfig::OnLimit::kDelay;
  std::shared_ptr<Descriptors> shared = at_once ? held : nullptr;
  PendingDecision pending{
      // Shared with the completion, which formats the headers from them.
      .descriptors = std::move(held),
      .cost = cost,
      .started = Clock::now(),
      .delayed = nullptr,
      .done = taken ? std::move(*taken) : later.take()};
  if (route.on_limit == RouteConfig::OnLimit::kDelay) {
    // Enforced limits may reserve tokens up to max_delay ahead; a shadow limit never waits.
    const double max_wait = std::chrono::duration<double>(route.max_delay).count();
    for (auto& descriptor : *pending.descriptors) {
      if (!descriptor.shadow) descriptor.max_wait_seconds = max_wait;
    }
    pending.delayed = std::make_shared<DelayedRequest>(executor_);
    later.watch_client([delayed = pending.delayed] { delayed->client_gone(); });
  }
  const std::vector<LimitDescriptor>& descriptors = *pending.descriptors;
  const auto started = pending.started;
  RateDecisionHandler handler = [self = shared_from_this(), &ctx, pending = std::move(pending)](
                                    std::error_code ec, RateDecision&& decision) mutable {
    self->on_decided(ctx, std::move(pending), ec, std::move(decision));
  };
  if (!at_once) {
    limiter_->decide(descriptors, cost, std::move(handler));
    return MiddlewareResult::pending();
  }
  std::optional<RateDecision> decided = limiter_->decide_or_wait(descriptors, cost, handler);
  if (!decided) return MiddlewareResult::pending();
  // Decided at once: the completion is dropped uncalled, with the handler's
  // share of the descriptors.
  handler = nullptr;
  PendingDecision now{.descriptors = std::move(shared),
                      .cost = cost,
                      .started = started,
                      .delayed = nullptr,
                      .done = nullptr};
  return conclude(ctx, now, {}, std::move(*decided));
}

std::shared_ptr<RateLimitMiddleware::Descriptors> RateLimitMiddleware::take_descriptors() {
  if (spare_descriptors_.empty()) return std::make_shared<Descriptors>();
  std::shared_ptr<Descriptors> held = std::move(spare_descriptors_.back());
  spare_descriptors_.pop_back();
  return held;
}

void RateLimitMiddleware::give_back(std::shared_ptr<Descriptors> held) {
  if (!held || held.use_count() != 1 || spare_descriptors_.size() >= kSpareDescriptors) return;
  held->clear();
  spare_descriptors_.push_back(std::move(held));
}

void RateLimitMiddleware::on_decided(RequestContext& ctx, PendingDecision pending,
                                     std::error_code ec, RateDecision&& decision) {
  MiddlewareResult result = conclude(ctx, pending, ec, std::move(decision));
  if (result.step != MiddlewareStep::kPending) pending.done(std::move(result.reply));
}

MiddlewareResult RateLimitMiddleware::conclude(RequestContext& ctx, PendingDecision& pending,
                                               std::error_code ec, RateDecision&& decision) {
  // However the decision ends, its descriptors go back to the spares after it
  // (unless a wait took them).
  struct GiveBack {
    RateLimitMiddleware& self;
    PendingDecision& pending;
    ~GiveBack() { self.give_back(std::move(pending.descriptors)); }
  } const give_back_after{*this, pending};
  const RouteConfig& route = *ctx.route;
  const std::vector<LimitDescriptor>& descriptors = *pending.descriptors;
  const double cost = pending.cost;
  const auto answered = Clock::now();
  check_duration_.observe(std::chrono::duration<double>(answered - pending.started).count());
  if (ctx.decision.traced) {
    trace_decision(ctx.decision, descriptors, decision, ec, pending.started, answered);
  }
  // A local route without a fallback store (tests only) fails closed.
  const FailureMode mode = route.on_redis_failure == FailureMode::kLocal && !fallback_
                               ? FailureMode::kClosed
                               : route.on_redis_failure;
  if (ec) metrics_.add(fail_counter(mode), scratch_labels({{"route", route.name}}));
  if (ec && mode != FailureMode::kLocal) {
    ctx.decision.decision = mode == FailureMode::kOpen ? "fail_open" : "fail_closed";
    ctx.decision.cost = cost;
    if (mode == FailureMode::kOpen) return MiddlewareResult::next();
    return MiddlewareResult::respond(unavailable_reply(decision));
  }
  if (ec) {
    // Redis cannot decide: this instance's share decides, answered as Redis' would be.
    decision = fallback_->decide(descriptors, cost);
    ctx.decision.answered_by = "fallback";
  } else if (fallback_ && decision.local == LocalDecision::kNone) {
    fallback_->on_store_decided(descriptors);  // Redis decides these buckets again
  }
  const RateOutcome outcome = select_outcome(descriptors, decision);
  record_decision(ctx.decision, descriptors, decision, outcome, cost, static_cast<bool>(ec));
  if (outcome.kind == RateOutcome::Kind::kLimited && audit_) {
    note_denial(ctx, descriptors, decision, outcome);
  }
  if (ec && decision.allowed) {
    hold_local_slots(ctx, descriptors, decision);
  } else if (!ec && decision.allowed) {
    hold_slots(ctx, descriptors, decision);
    if (route.cost_from_response.enabled()) settle_at_end(ctx, descriptors, decision, cost);
  }
  count_decision(route, descriptors, decision, outcome);
  // Shadow limits are a dry run: the client sees the enforced limits only.
  const ClientView view = client_view(descriptors, decision);
  const std::span<const LimitDescriptor> shown =
      std::span<const LimitDescriptor>(view.filtered ? view.limits : descriptors);
  const RateDecision& shown_decision = view.filtered ? view.decision : decision;
  append_rate_limit_headers(ctx.response_headers, shown, cost, shown_decision);
  switch (outcome.kind) {
    case RateOutcome::Kind::kAllowed:
      return MiddlewareResult::next();
    case RateOutcome::Kind::kLimited:
      return MiddlewareResult::respond(limited_reply(route.reject, shown, shown_decision));
    case RateOutcome::Kind::kDelayed:
      // Only delay routes let a limit wait.
      if (!pending.delayed) return MiddlewareResult::next();
      // Only the store's reservations are given back (never the fallback's).
      wait(*pending.delayed, outcome.delay_seconds, route, cost, std::move(pending.descriptors),
           ec ? RateDecision{} : std::move(decision), std::move(pending.done));
      return MiddlewareResult::pending();
  }
  return MiddlewareResult::next();
}

void RateLimitMiddleware::count_decision(const RouteConfig& route,
                                         const std::vector<LimitDescriptor>& descriptors,
                                         const RateDecision& decision, const RateOutcome& outcome) {
  if (decision.local == LocalDecision::kDenyCache || decision.local == LocalDecision::kLease) {
    local_decisions_.add(route.name,
                         decision.local == LocalDecision::kLease ? "lease" : "deny_cache");
  }
  for (std::size_t i = 0; i < outcome.limits.size(); ++i) {
    const LimitDescriptor& limit = descriptors[i];
    decision_counters_.count(&route, i, route.name, limit.limit, outcome.limits[i]);
    if (near_limit(limit, outcome.limits[i], decision, i)) {
      metrics_.add("sluice_ratelimit_near_limit_total",
                   scratch_labels({{"route", route.name}, {"limit", limit.limit}}));
    }
  }
}

void RateLimitMiddleware::note_denial(RequestContext& ctx,
                                      const std::vector<LimitDescriptor>& descriptors,
                                      const RateDecision& decision, const RateOutcome& outcome) {
  const std::size_t chosen = deciding_limit(descriptors, decision, outcome);
  if (chosen >= descriptors.size()) return;
  if (ctx.decision.consumer.empty()) {
    // The label the access log would show (a key's fingerprint), worked out
    // again for a denial only: the key is read from the request once more.
    ctx.decision.consumer = caller_label(identify(request_view(ctx), ctx.config->api_keys),
                                         ctx.config->redis.key_secret);
  }
  const double retry = retry_after_seconds(descriptors, decision);
  audit_->denied(Denial{ctx.route->name, descriptors[chosen].limit,
                        denied_caller(ctx.decision.consumer, descriptors[chosen]),
                        ctx.decision.plan, static_cast<std::int64_t>(std::ceil(retry * 1000))});
}

void RateLimitMiddleware::wait(DelayedRequest& delayed, double seconds, const RouteConfig& route,
                               double cost,
                               std::shared_ptr<std::vector<LimitDescriptor>> descriptors,
                               RateDecision decision, MiddlewareDone done) {
  delayed.wait(seconds, [self = shared_from_this(), &route, descriptors = std::move(descriptors),
                         decision = std::move(decision), cost,
                         done = std::move(done)](bool went, double waited) {
    if (went) {
      self->metrics_.observe("sluice_ratelimit_delay_seconds",
                             scratch_labels({{"route", route.name}}), waited);
      return done(std::nullopt);
    }
    // The client left while waiting: what the request debited goes back, and
    // the session drops the outcome.
    auto refunds = debited_buckets(*descriptors, decision, cost);
    if (!refunds.empty()) self->limiter_->refund(std::move(refunds), nullptr);
    self->metrics_.add("sluice_ratelimit_delay_abandoned_total",
                       scratch_labels({{"route", route.name}}));
    done(std::nullopt);
  });
}

}  // namespace sluice
