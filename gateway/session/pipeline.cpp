#include "gateway/session/pipeline.hpp"

#include <vector>

namespace sluice {

Pipeline::Pipeline() {
  ctx_.header = [this](std::string_view name) -> std::optional<std::string_view> {
    auto it = head_->find(name);
    if (it == head_->end()) return std::nullopt;
    return std::string_view{it->value()};
  };
  ctx_.header_count = [this](std::string_view name) -> std::size_t { return head_->count(name); };
}

RequestContext& Pipeline::begin(const HttpFields& head) {
  end({});
  head_ = &head;
  next_ = 0;
  ctx_.response_headers.clear();
  ctx_.identity_headers.clear();
  ctx_.caller.clear();
  ctx_.decision = {};
  ctx_.response_observer.reset();
  ctx_.request_body = {};
  ctx_.request_body_length.reset();
  return ctx_;
}

void Pipeline::end(const ExchangeEnd& end) {
  if (ctx_.on_end.empty()) return;
  // Taken out first: a hook may register another (called at the next end).
  std::vector<EndHook> hooks;
  hooks.swap(ctx_.on_end);
  for (auto& hook : hooks) hook(end);
  hooks.clear();
  // The list's memory serves the next request on this pipeline.
  if (ctx_.on_end.empty()) ctx_.on_end.swap(hooks);
}

MiddlewareResult Pipeline::advance(const MiddlewareChain& chain, MiddlewareLater& later) {
  while (next_ < chain.steps.size()) {
    auto result = chain.steps[next_++]->on_request(ctx_, later);
    if (result.step != MiddlewareStep::kContinue) return result;
  }
  return MiddlewareResult::next();
}

}  // namespace sluice
