// What an exchange did on its way besides its end: each attempt at a server
// with its outcome, and its retries. The exchange notes them as they happen;
// its host takes them (UpstreamExchange::take_facts) and counts them once,
// when it records the exchange, however it ended. Plain data.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "upstream/upstream_config.hpp"
#include "upstream/upstream_error.hpp"

namespace sluice {

// One attempt at a server: which, when it started, and how it ended (its
// outcome and the server's status; unset while under way). A request's trace
// reads them.
struct AttemptRecord {
  std::size_t server = 0;  // an index into the upstream's servers
  std::chrono::steady_clock::time_point started;
  std::chrono::steady_clock::time_point ended_at;  // when its outcome was noted
  bool ended = false;
  UpstreamOutcome outcome = UpstreamOutcome::kOk;
  unsigned status = 0;
};

struct ExchangeFacts {
  const UpstreamConfig* upstream = nullptr;  // null: no exchange started
  std::array<std::uint16_t, kUpstreamOutcomeCount> attempts{};  // by UpstreamOutcome
  std::uint16_t retries = 0;
  // Retries a route's policy wanted that the upstream's retry budget refused.
  std::uint16_t retries_refused = 0;

  void attempt(UpstreamOutcome outcome) { ++attempts[static_cast<std::size_t>(outcome)]; }
  // fn(outcome, n) for every outcome some attempt had.
  template <class Fn>
  void each_attempt(Fn&& fn) const {
    for (std::size_t i = 0; i < attempts.size(); ++i) {
      if (attempts[i] > 0) fn(static_cast<UpstreamOutcome>(i), attempts[i]);
    }
  }
};

}  // namespace sluice
