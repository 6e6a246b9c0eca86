// Reconnect delays: capped exponential backoff with "equal jitter" (uniform in
// [d/2, d] for the attempt's delay d). Pure apart from its random source; one
// per client, used on its executor.
#pragma once

#include <chrono>
#include <random>

namespace sluice::redis {

class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max,
          unsigned seed = std::random_device{}());

  // The delay before the next attempt; each call doubles the base delay up to the cap.
  std::chrono::milliseconds next();
  // After a success: the next delay starts from `initial` again.
  void reset() { attempt_ = 0; }

 private:
  std::chrono::milliseconds initial_;
  std::chrono::milliseconds max_;
  unsigned attempt_ = 0;
  std::minstd_rand rng_;
};

}  // namespace sluice::redis
