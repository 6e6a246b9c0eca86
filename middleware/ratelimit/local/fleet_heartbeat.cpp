#include "middleware/ratelimit/local/fleet_heartbeat.hpp"

#include <random>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>

namespace sluice {

std::string random_instance_id() {
  std::random_device random;
  std::string id;
  for (int i = 0; i < 4; ++i) id += fmt::format("{:08x}", static_cast<std::uint32_t>(random()));
  return id;
}

FleetHeartbeat::FleetHeartbeat(boost::asio::any_io_executor executor, Send send,
                               std::shared_ptr<FallbackStore> store, std::function<void()> failed)
    : executor_(executor),
      send_(std::move(send)),
      store_(std::move(store)),
      failed_(std::move(failed)),
      timer_(executor) {}

void FleetHeartbeat::enable(bool on) {
  if (on == enabled_) return;
  enabled_ = on;
  ++generation_;  // a timer already fired belongs to the old state
  if (on) {
    beat();
  } else {
    timer_.cancel();
  }
}

void FleetHeartbeat::beat() {
  joined_ = true;
  send_(false,
        [weak = weak_from_this()](std::error_code ec, long long live, std::string_view detail) {
          if (auto self = weak.lock()) self->on_answer(ec, live, detail);
        });
  timer_.expires_after(kFleetHeartbeatInterval);
  timer_.async_wait(
      [weak = weak_from_this(), generation = generation_](boost::system::error_code ec) {
        auto self = weak.lock();
        if (ec || !self || generation != self->generation_) return;
        self->beat();
      });
}

// No answer: the store keeps the last count.
void FleetHeartbeat::on_answer(std::error_code ec, long long live, std::string_view detail) {
  const bool first = std::exchange(first_answer_, false);
  if (ec || live <= 0) {
    if (first) return;  // the process's first heartbeat, sent while connecting
    if (failed_) failed_();
    if (!failing_) {
      spdlog::warn("fleet heartbeat failed: {}{}{}; the local fallback keeps fleet size {}",
                   ec ? ec.message() : "no live member", detail.empty() ? "" : ": ", detail,
                   store_->fleet_size());
    }
    failing_ = true;
    return;
  }
  if (failing_) spdlog::info("fleet heartbeat works again: {} live instances", live);
  failing_ = false;
  store_->set_learned_fleet_size(static_cast<unsigned>(live));
}

void FleetHeartbeat::leave(std::function<void()> done) {
  enable(false);
  if (!joined_) {
    boost::asio::post(executor_, std::move(done));
    return;
  }
  joined_ = false;
  send_(true, [done = std::move(done)](std::error_code, long long, std::string_view) { done(); });
}

}  // namespace sluice
