// What one worker tells the fleet about its denials, off the request path:
// the counts behind the most-limited view (GET /ratelimit/top), and, with
// audit.redis_stream, one stream entry per denial. A denial is noted in
// memory (denied(): no I/O, bounded); once a second the worker sends what it
// noted as plain commands, pipelined, on its own Redis connection (made while
// a route has limits, replaced when a reload changes the Redis settings). A
// flush still in flight skips the next one; stream entries beyond the
// worker's queue bound, or whose call fails, are dropped and counted in
// sluice_audit_dropped_total, and counts that cannot be kept or sent in
// sluice_ratelimit_top_dropped_total. A request never waits for any of it.
// Created, used and destroyed on the worker's executor.
//
// Redis layout: top_plan.hpp (the view's sorted sets, under the key prefix,
// bounded whatever number of distinct callers is denied). The stream is
// audit.redis_stream as named.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "gateway/config/config.hpp"
#include "middleware/ratelimit/audit/denial_counts.hpp"
#include "middleware/ratelimit/audit/top_plan.hpp"
#include "upstream/redis/client.hpp"
#include "upstream/redis/client_factory.hpp"

namespace sluice {

class MetricsShard;

// One denied request, as the stream records it.
struct Denial {
  std::string route;
  std::string limit;   // the limit that denied
  std::string caller;  // consumer id, or a key's or bucket's fingerprint
  std::string plan;
  std::int64_t retry_after_ms = 0;
};

// A caller of the most-limited view.
struct TopEntry {
  std::string caller;
  double denials = 0;
};

inline constexpr std::size_t kAuditQueueMax = 10000;  // stream entries waiting, per worker
// The audit connection's commands (flushes, stream appends, reads of the
// view) are on no request's path: each may take this long, or
// redis.timeout_ms if longer, rather than a decision's deadline, so a read of
// a long window on a busy Redis or a loaded host still answers.
inline constexpr std::chrono::milliseconds kAuditCommandTimeout{2000};

class DenialAudit : public std::enable_shared_from_this<DenialAudit> {
 public:
  using TopHandler = std::function<void(std::error_code, std::vector<TopEntry>)>;

  DenialAudit(boost::asio::any_io_executor executor, const std::shared_ptr<const Config>& config,
              MetricsShard& metrics, std::string instance);
  ~DenialAudit();

  // The configuration in force changed (the worker's pointer holds the new one).
  void on_config();
  // Notes a denial (the request path: memory only).
  void denied(const Denial& denial);
  // The `n` callers with the most denials of `limit` over the last `window_s`
  // seconds, across the fleet (what every instance has flushed).
  void top(const std::string& limit, std::int64_t window_s, std::size_t n, TopHandler done);
  // Sends what is noted (once), and closes the connection once that is
  // answered; the worker's loop runs until then.
  void close();

 private:
  void arm();
  void flush();
  void send_counts(std::vector<DenialCounts::Entry> entries);
  void send_stream();
  // Sends `commands` (keyed, pipelined) as one flush call: `each(i, ec)` for
  // every command's outcome, and in_flight_ back down once all are answered.
  void send_all(std::vector<std::vector<std::string>> commands,
                std::function<void(std::size_t, std::error_code)> each);
  void dropped_counts(std::uint64_t denials);
  void answered();  // a flush call came back
  redis::Client* client();
  // Runs `send` with the connection once it is ready, else `failed`.
  void when_connected(std::function<void(redis::Client*)> send,
                      std::function<void(std::error_code)> failed);

  boost::asio::any_io_executor executor_;
  const std::shared_ptr<const Config>& config_;
  MetricsShard& metrics_;
  std::string instance_;
  redis::ClientFactory make_client_;
  redis::Options options_;
  std::unique_ptr<redis::Client> client_;
  std::vector<std::unique_ptr<redis::Client>> retired_;
  boost::asio::steady_timer timer_;
  bool armed_ = false;
  bool closed_ = false;
  std::size_t in_flight_ = 0;  // flush calls not answered yet
  DenialCounts counts_;
  std::uint64_t counts_dropped_seen_ = 0;  // counts_.dropped() already counted
  std::deque<Denial> queue_;               // stream entries not sent yet
};

}  // namespace sluice
