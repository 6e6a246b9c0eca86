// The access log: one JSON line per finished exchange to stdout, when
// log.access_log is on. An exchange observer, called on the worker's
// executor; it never logs API keys or other header values.
#pragma once

#include "gateway/middleware.hpp"

namespace sluice {

class AccessLog final : public ExchangeObserver {
 public:
  void on_exchange(const Config& config, const ExchangeSummary& summary) override;
};

}  // namespace sluice
