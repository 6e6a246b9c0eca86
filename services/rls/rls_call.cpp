#include "services/rls/rls_call.hpp"

#include <algorithm>
#include <memory>
#include <vector>

#include "middleware/ratelimit/admin/bucket_endpoint.hpp"
#include "middleware/ratelimit/consumers/consumer.hpp"
#include "middleware/ratelimit/descriptors.hpp"
#include "middleware/ratelimit/local/local_layer.hpp"
#include "services/rls/rls_call_state.hpp"

namespace sluice {
namespace {

using grpc_code::kInvalidArgument;
using grpc_code::kUnavailable;
using rls::Call;
using rls::kNoCaller;
using rls::Planned;
using rls::refused;
using rls::respond;
namespace pb = rls::pb;

// A quota of `n` per `unit` (RateLimitUnit numbering: no week), the size Envoy asks for.
std::shared_ptr<LimitConfig> override_quota(std::uint32_t n, int unit) {
  const auto* found = std::find_if(std::begin(kRlsUnits), std::end(kRlsUnits),
                                   [unit](const RlsUnit& u) { return u.number == unit; });
  if (found == std::end(kRlsUnits) || found->period == CalendarPeriod::kWeek) return nullptr;
  auto limit = std::make_shared<LimitConfig>();
  limit->name = "override";
  limit->algorithm = LimitAlgorithm::kQuota;
  limit->period = found->period;
  limit->bucket.capacity = n;
  return limit;
}

// A slot's number for the request id a concurrency rule's descriptor ends
// with: the same for its release, below 2^53 (a double holds it exactly),
// and apart from every bucket's hash (its own input).
double rls_slot(const RlsMatch& match, std::string_view secret) {
  std::string input = "slot:";
  input += match.bucket_input;
  input += std::to_string(match.slot_name.size());
  input += ':';
  input += match.slot_name;
  const KeyHash hash = key_hash(input, secret);
  std::uint64_t n = 0;
  for (int i = 0; i < 7; ++i) n = (n << 8) | hash[static_cast<std::size_t>(i)];
  // Any residue mod 16 (the script prunes ended slots on every 16th number).
  n &= (std::uint64_t{1} << 53) - 1;
  return static_cast<double>(n == 0 ? 1 : n);
}

// The size of a rule's limit for the descriptor: its plan's and a store
// consumer's override where the descriptor carries an API key.
BucketParams rls_params(const Planned& p, const Call& call) {
  const RlsRule* rule = p.match.rule;
  if (p.override_limit || !rule || p.caller == kNoCaller) return p.limit->bucket;
  const Identity& identity = call.callers[p.caller].identity;
  if (identity.stored) return consumer_params(*p.limit, *identity.stored, rule->limit_name);
  return p.limit->for_plan(identity.plan);
}

// The descriptor's entries as the request gave them; the API key's replaced
// by what stands for it in buckets (its caller's bucket value).
void read_entries(const Call& call, const Planned& p, int index, std::vector<RlsEntry>& out) {
  out.clear();
  for (const auto& entry : call.request.descriptors(index).entries()) {
    out.emplace_back(entry.key(), entry.value());
  }
  if (p.caller != kNoCaller && p.match.api_key_entry < out.size()) {
    out[p.match.api_key_entry].second = call.callers[p.caller].bucket_value;
  }
}

// Replaced rules, then the buckets to decide, grouped by their hits, and
// the slots to give back; decides them.
void decide_planned(const std::shared_ptr<Call>& call) {
  std::vector<RlsEntry> entries;
  std::vector<std::string> replaced_names;
  for (std::size_t i = 0; i < call->planned.size(); ++i) {
    Planned& p = call->planned[i];
    if (p.caller != kNoCaller) {
      // Matched again with the consumer in place of the key: the same rule
      // (an api_key node has no value), the consumer's bucket.
      read_entries(*call, p, static_cast<int>(i), entries);
      const std::size_t caller = p.caller;
      p.match = match_rls_descriptor(*call->domain, entries);
      p.caller = caller;
    }
    const RlsRule* rule = p.match.rule;
    if (p.match.release) {
      // Given back whatever became of its consumer since, unless the key
      // could not be resolved (its bucket is then not known).
      p.release_failed = p.caller != kNoCaller && call->callers[p.caller].store_failed;
      continue;  // a release neither replaces nor is replaced
    }
    if (p.caller != kNoCaller) {
      const auto verdict = call->callers[p.caller].verdict;
      p.refused = verdict == RlsCaller::Verdict::kUnknownKey ||
                  verdict == RlsCaller::Verdict::kDisabled;
      if (p.refused && !rule->shadowed()) call->refused = true;
    }
    // An override is a bare limit, replacing nothing; an unlimited rule's
    // replaces count (as envoyproxy/ratelimit collects them).
    if (rule && !p.override_limit) {
      for (const auto& name : rule->replaces) replaced_names.push_back(name);
    }
  }
  const std::string& secret = call->config->redis.key_secret;
  for (Planned& p : call->planned) {
    const RlsRule* rule = p.match.rule;
    if (p.match.release) {
      if (!p.release_failed) p.limit = rule->limit.get();
    } else if (call->refused || p.refused ||
               (p.caller != kNoCaller &&
                call->callers[p.caller].verdict != RlsCaller::Verdict::kLimited)) {
      continue;  // a refused call decides nothing; an exempt caller takes nothing
    } else if (p.override_limit) {
      p.limit = p.override_limit.get();
    } else if (rule && !rule->unlimited && rule->limit) {
      p.replaced = !rule->name.empty() && std::find(replaced_names.begin(), replaced_names.end(),
                                                    rule->name) != replaced_names.end();
      if (!p.replaced) p.limit = rule->limit.get();
    }
    if (!p.limit) continue;
    LimitDescriptor d = limit_descriptor(*p.limit, rls_params(p, *call),
                                         bucket_key_hash(p.match.bucket_input, secret));
    if (rule && rule->shadow && !p.override_limit) d.shadow = true;
    if (d.algorithm == LimitAlgorithm::kConcurrency) d.slot = rls_slot(p.match, secret);
    if (p.match.release) {
      call->releases.push_back(BucketRefund{std::move(d), 1});
      continue;
    }
    auto at = std::find(call->group_hits.begin(), call->group_hits.end(), p.hits);
    if (at == call->group_hits.end()) {
      call->group_hits.push_back(p.hits);
      call->groups.emplace_back();
      at = call->group_hits.end() - 1;
    }
    p.group = static_cast<std::size_t>(at - call->group_hits.begin());
    auto& group = call->groups[p.group];
    p.slot = group.size();
    group.push_back(std::move(d));
  }
  call->decisions.resize(call->groups.size());
  call->pending = call->groups.size() + (call->releases.empty() ? 0 : 1);
  if (call->pending == 0) return respond(*call);
  const std::shared_ptr<LocalLayer> held = call->layer.lock();
  if (!held) return call->done(refused(kUnavailable, "the worker is stopping"));
  LocalLayer& layer = *held;
  for (std::size_t g = 0; g < call->groups.size(); ++g) {
    layer.decide(call->groups[g], call->group_hits[g],
                 [call, g](std::error_code ec, RateDecision&& decision) {
                   if (ec) call->error = ec;
                   call->decisions[g] = std::move(decision);
                   if (--call->pending == 0) respond(*call);
                 });
  }
  if (call->releases.empty()) return;
  // A release is the removal of the request's own slot: one the decision
  // never took (the call was denied) is not there to remove.
  layer.refund(std::move(call->releases), [call](std::error_code ec) {
    if (ec) call->release_failed = true;
    if (--call->pending == 0) respond(*call);
  });
}

}  // namespace

void decide_rls_call(const BucketWorker& worker, std::string_view bytes, RlsDone done) {
  auto call = std::make_shared<Call>();
  call->config = *worker.config;
  call->layer = worker.layer;
  call->metrics = worker.metrics;
  call->audit = worker.audit;
  call->done = std::move(done);
  const RlsConfig* rls = call->config->rls.get();
  if (!rls) return call->done(refused(kUnavailable, "the rate-limit service is not configured"));
  pb::RateLimitRequest& request = call->request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return call->done(refused(kInvalidArgument, "not a RateLimitRequest"));
  }
  if (request.domain().empty()) {
    return call->done(refused(kInvalidArgument, "rate limit domain must not be empty"));
  }
  if (request.descriptors_size() == 0) {
    return call->done(refused(kInvalidArgument, "rate limit descriptor list must not be empty"));
  }
  if (static_cast<std::size_t>(request.descriptors_size()) > rls->max_descriptors) {
    return call->done(refused(kInvalidArgument, "more than " +
                                                    std::to_string(rls->max_descriptors) +
                                                    " descriptors (rls.max_descriptors)"));
  }
  const RlsDomain* domain = rls->find(request.domain());
  call->domain = domain;
  call->domain_label = domain ? domain->domain : "unknown";
  const double request_hits = request.hits_addend() ? request.hits_addend() : 1;
  std::vector<RlsEntry> entries;
  std::vector<std::string_view> keys;  // the API keys to resolve
  call->planned.resize(static_cast<std::size_t>(request.descriptors_size()));
  for (int i = 0; i < request.descriptors_size(); ++i) {
    const auto& descriptor = request.descriptors(i);
    Planned& p = call->planned[static_cast<std::size_t>(i)];
    if (descriptor.entries_size() == 0) {
      return call->done(refused(kInvalidArgument, "a descriptor without entries"));
    }
    entries.clear();
    for (const auto& entry : descriptor.entries()) entries.emplace_back(entry.key(), entry.value());
    p.hits = descriptor.has_hits_addend() ? static_cast<double>(descriptor.hits_addend().value())
                                          : request_hits;
    if (domain) p.match = match_rls_descriptor(*domain, entries);
    // Envoy's override: in a configured domain (an unknown one limits
    // nothing), never on a concurrency rule (its slot is its limit).
    if (descriptor.has_limit() && domain && !(p.match.rule && p.match.rule->concurrency())) {
      p.override_limit =
          override_quota(descriptor.limit().requests_per_unit(), descriptor.limit().unit());
    }
    if (p.override_limit && p.match.bucket_input.empty()) {
      p.match.bucket_input = rls_override_bucket(request.domain(), entries);
    }
    if (p.match.rule && !p.override_limit && p.match.api_key_entry < entries.size()) {
      p.caller = keys.size();
      keys.push_back(entries[p.match.api_key_entry].second);
    }
  }
  if (keys.empty()) return decide_planned(call);
  resolve_rls_callers(worker, call->config, std::move(keys),
                      [call](std::vector<RlsCaller> callers) {
                        call->callers = std::move(callers);
                        decide_planned(call);
                      });
}

}  // namespace sluice
