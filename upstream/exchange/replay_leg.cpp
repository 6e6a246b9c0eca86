#include "upstream/exchange/replay_leg.hpp"

#include <algorithm>
#include <cstring>

#include <boost/asio/post.hpp>

#include "upstream/exchange/upstream_exchange.hpp"

namespace sluice {
namespace {

// A kept body's buffer is freed after its request past this size.
constexpr std::size_t kKeepCapacity = 16 * 1024;

}  // namespace

void ReplayLeg::arm(ClientLeg& client, std::size_t max_bytes) {
  client_ = &client;
  max_bytes_ = max_bytes;
  kept_.clear();
  replay_at_ = 0;
  overflowed_ = false;
  reads_ = 0;
  end_owed_ = false;
  continued_ = false;
  once_ = read_ahead_held_ = false;
}

void ReplayLeg::disarm() {
  if (kept_.capacity() > kKeepCapacity) {
    std::string().swap(kept_);
  } else {
    kept_.clear();
  }
  replay_at_ = 0;
  end_owed_ = false;
  continued_ = false;
  once_ = read_ahead_held_ = false;
}

void ReplayLeg::keep(const char* data, std::size_t n) {
  ++reads_;
  if (overflowed_ || n == 0) return;
  if (kept_.size() + n > max_bytes_) {
    overflowed_ = true;  // the body can no longer be sent again whole
    std::string().swap(kept_);
    replay_at_ = 0;
    return;
  }
  kept_.append(data, n);
  replay_at_ = kept_.size();  // what is read now is not to be replayed
}

void ReplayLeg::read_body(std::span<char> into) {
  if (!replaying() && !end_owed_) return client_->read_body(into);
  const std::size_t n = std::min(into.size(), kept_.size() - replay_at_);
  std::memcpy(into.data(), kept_.data() + replay_at_, n);
  replay_at_ += n;
  // The last replayed read ends the body when the client's had ended (a
  // body that goes on is read from the client after it).
  if (!replaying()) {
    end_owed_ = false;
    if (once_) {
      // Replayed whole and wanted for nothing else: freed now.
      overflowed_ = true;
      std::string().swap(kept_);
      replay_at_ = 0;
    }
    if (read_ahead_held_) x_.read_ahead_replayed();
    once_ = read_ahead_held_ = false;
  }
  replay_posted_ = true;
  boost::asio::post(x_.executor_, x_.handler([n](UpstreamExchange& x) {
                      x.replay_.replay_posted_ = false;
                      if (x.leg_) x.leg_->on_body_read({}, n);
                    }));
}

}  // namespace sluice
