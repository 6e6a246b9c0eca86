#include "upstream/h2/nghttp2_pump.hpp"

#include <nghttp2/nghttp2.h>

namespace sluice {

ssize_t Nghttp2Pump::receive(nghttp2_session* session, std::span<const std::uint8_t> bytes) {
  receiving_ = true;
  struct Done {
    bool& flag;
    ~Done() { flag = false; }
  } done{receiving_};
  return nghttp2_session_mem_recv(session, bytes.data(), bytes.size());
}

int Nghttp2Pump::gather(nghttp2_session* session) {
  while (out_.size() < kMaxPendingOut) {
    const std::uint8_t* data = nullptr;
    const auto n = nghttp2_session_mem_send(session, &data);
    if (n < 0) return static_cast<int>(n);
    if (n == 0) break;
    out_.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
  }
  return 0;
}

std::uint64_t Nghttp2Pump::start_write() {
  writing_ = true;
  return ++write_generation_;
}

void Nghttp2Pump::write_done() {
  writing_ = false;
  ++write_generation_;
  out_.clear();
  if (out_.capacity() > 2 * kMaxPendingOut) out_.shrink_to_fit();
}

}  // namespace sluice
