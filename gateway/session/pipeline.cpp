#include "gateway/session/pipeline.hpp"

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
  ctx_.decision = {};
  return ctx_;
}

void Pipeline::end(const ExchangeEnd& end) {
  if (ctx_.on_end.empty()) return;
  auto hooks = std::move(ctx_.on_end);
  ctx_.on_end.clear();
  for (auto& hook : hooks) hook(end);
}

MiddlewareResult Pipeline::advance(const MiddlewareChain& chain, MiddlewareLater& later) {
  while (next_ < chain.steps.size()) {
    auto result = chain.steps[next_++]->on_request(ctx_, later);
    if (result.step != MiddlewareStep::kContinue) return result;
  }
  return MiddlewareResult::next();
}

}  // namespace sluice
