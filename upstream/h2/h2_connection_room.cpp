// H2Connection: how many streams it takes, opening them, the streams that
// wait in it for the server's SETTINGS (h2_room.hpp says how many go when),
// and a stream's body, window and release.
#include <algorithm>
#include <utility>

#include <nghttp2/nghttp2.h>

#include "upstream/block_allocator.hpp"
#include "upstream/h2/h2_connection.hpp"

namespace sluice {

H2Room H2Connection::room() const {
  return {.settings_known = settings_known_,
          .max_streams = nghttp2_session_get_remote_settings(
              session_, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS),
          .sent = streams_.size(),
          .queued = queued_.size()};
}

bool H2Connection::has_room() const {
  return usable() && h2_takes_stream(room());
}

std::shared_ptr<H2Stream> H2Connection::open_stream(const H2HeaderBlock& head, bool has_body,
                                                    StreamWake wake) {
  if (!usable()) return nullptr;
  auto s = std::allocate_shared<H2Stream>(BlockAllocator<H2Stream>{});
  s->wake = std::move(wake);
  if (!settings_known_ && h2_sendable(room()) == 0) {
    // It waits for the server's SETTINGS (place_queued), kQueued.
    queued_.push_back({s, head, has_body});
    return s;
  }
  return submit(s, head, has_body) ? s : nullptr;
}

// The streams waiting go in turn as far as the server allows. Once its
// SETTINGS are known (or the connection goes away), those left have no
// place here: their exchanges open them elsewhere.
void H2Connection::place_queued() {
  while (!queued_.empty()) {
    const bool may_send = usable() && h2_sendable(room()) > 0;
    if (!may_send && usable() && !settings_known_) return;  // still waiting for the SETTINGS
    Queued q = std::move(queued_.front());
    queued_.pop_front();
    if (may_send && submit(q.stream, q.head, q.has_body)) {
      wake(*q.stream);  // its body may go once the connection is ready
      continue;
    }
    q.stream->state = H2Stream::State::kUnplaced;
    wake(*q.stream);
  }
}

// Its exchange let go of a stream that was still waiting.
void H2Connection::unqueue(H2Stream& s) {
  s.state = H2Stream::State::kUnplaced;
  std::erase_if(queued_, [&](const Queued& q) { return q.stream.get() == &s; });
}

// The connection closed: a connect that failed fails the streams waiting for
// it as it does the one sent (each tries another server); otherwise, never
// sent, they are opened elsewhere.
void H2Connection::end_queued(const H2ConnectFailure* failure) {
  auto queued = std::exchange(queued_, {});
  for (Queued& q : queued) {
    if (failure) {
      q.stream->state = H2Stream::State::kConnectFailed;
      q.stream->connect_failure = *failure;
    } else {
      q.stream->state = H2Stream::State::kUnplaced;
    }
    wake(*q.stream);
  }
}

void H2Connection::room_changed(bool all) {
  if (on_room_) on_room_(all);
}

// ---- Streams ----------------------------------------------------------------------
void H2Connection::send_body(H2Stream& s, const char* data, std::size_t n, bool last,
                             const HttpFields* trailers) {
  s.piece = data;
  s.piece_left = n;
  s.piece_last = last;
  s.piece_pending = true;
  s.request_trailers = last ? trailers : nullptr;
  if (s.closed()) return;
  nghttp2_session_resume_data(session_, s.id);
  request_flush();
}

void H2Connection::consume(H2Stream& s, std::size_t n) {
  if (n == 0 || state_ == State::kClosed || s.closed()) return;
  nghttp2_session_consume_stream(session_, s.id, n);
  request_flush();
}

void H2Connection::release(H2Stream& s) {
  s.wake = nullptr;
  s.piece_pending = false;
  s.piece = nullptr;
  if (s.state == H2Stream::State::kQueued) return unqueue(s);
  if (state_ == State::kClosed || s.id == 0) return;
  s.data.clear();  // the connection's window had it back on arrival
  if (!s.closed()) nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s.id, NGHTTP2_CANCEL);
  request_flush();
}

H2Stream* H2Connection::stream(std::int32_t id) {
  return streams_.find(id);
}

void H2Connection::wake(H2Stream& s) {
  if (s.wake) s.wake();
}

}  // namespace sluice
