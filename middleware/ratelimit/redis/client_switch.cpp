#include "middleware/ratelimit/redis/client_switch.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/steady_timer.hpp>

namespace sluice {

ClientSwitch::ClientSwitch(boost::asio::any_io_executor executor,
                           std::unique_ptr<redis::Client> first, redis::ClientFactory make_client,
                           std::vector<const redis::Script*> scripts)
    : executor_(std::move(executor)),
      make_client_(std::move(make_client)),
      scripts_(std::move(scripts)) {
  load_scripts(*first);
  install(std::move(first));
}

void ClientSwitch::load_scripts(redis::Client& client) const {
  for (const redis::Script* script : scripts_) client.load_script(*script);
}

void ClientSwitch::install(std::unique_ptr<redis::Client> next) {
  if (client_) {
    carried_ += client_->stats();
    // The old connection is closed once the calls in flight on it must have
    // ended.
    auto timer = std::make_shared<boost::asio::steady_timer>(
        executor_, client_->options().command_timeout * 2 + std::chrono::milliseconds(100));
    timer->async_wait([timer, alive = std::weak_ptr<int>(alive_),
                       old = client_.get()](boost::system::error_code) {
      if (alive.lock()) old->close();
    });
    retired_.push_back(std::move(client_));
  }
  client_ = std::move(next);
  key_style_ = client_->routes_by_slot() ? KeyStyle::kHashTag : KeyStyle::kPlain;
  current_ = client_.get();
}

void ClientSwitch::maybe_switch() {
  if (!pending_) return;
  if (!pending_->is_ready() && std::chrono::steady_clock::now() < pending_deadline_) return;
  install(std::move(pending_));
}

bool ClientSwitch::reconfigure(redis::Options options) {
  const auto& target = pending_ ? pending_->options() : client_->options();
  if (options == target) return false;
  spdlog::info("redis settings changed: connecting to {}:{}", options.host, options.port);
  pending_deadline_ = std::chrono::steady_clock::now() + options.connect_timeout;
  pending_ = make_client_(std::move(options));
  load_scripts(*pending_);
  pending_->connect({});
  return true;
}

redis::Stats ClientSwitch::stats() const {
  redis::Stats stats = carried_;
  stats += client_->stats();
  return stats;
}

void ClientSwitch::close() {
  client_->close();
  if (pending_) pending_->close();
  for (auto& old : retired_) old->close();
}

}  // namespace sluice
