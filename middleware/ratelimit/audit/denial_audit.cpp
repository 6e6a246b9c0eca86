#include "middleware/ratelimit/audit/denial_audit.hpp"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <map>

#include "gateway/metrics.hpp"
#include "middleware/ratelimit/audit/top_plan.hpp"
#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"

namespace sluice {

namespace {

constexpr auto kFlushInterval = std::chrono::seconds(1);

std::int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

DenialAudit::DenialAudit(boost::asio::any_io_executor executor,
                         const std::shared_ptr<const Config>& config, MetricsShard& metrics,
                         std::string instance)
    : executor_(executor),
      config_(config),
      metrics_(metrics),
      instance_(std::move(instance)),
      make_client_(redis::client_factory(executor)),
      timer_(executor) {
  on_config();
}

DenialAudit::~DenialAudit() {
  if (client_) client_->close();
}

redis::Client* DenialAudit::client() {
  if (closed_) return nullptr;
  redis::Options options = redis_options(config_->redis);
  options.command_timeout = std::max(options.command_timeout, kAuditCommandTimeout);
  // Replaced only when a command waits a second past its own deadline.
  options.stuck_timeout =
      std::max(options.stuck_timeout, options.command_timeout + std::chrono::seconds(1));
  if (client_ && options == options_) return client_.get();
  if (client_) {
    // Calls under way on the old connection end with kClosed; the client
    // stays until the worker goes, since their handlers still run here.
    client_->close();
    retired_.push_back(std::move(client_));
  }
  options_ = options;
  client_ = make_client_(options);
  client_->connect(nullptr);
  return client_.get();
}

void DenialAudit::when_connected(std::function<void(redis::Client*)> send,
                                 std::function<void(std::error_code)> failed) {
  auto* redis = client();
  if (!redis) return failed(std::make_error_code(std::errc::operation_canceled));
  // At once when ready; else after the connect attempt under way (or a new one).
  redis->connect([weak = weak_from_this(), redis, send = std::move(send),
                  failed = std::move(failed)](std::error_code ec) {
    auto self = weak.lock();
    if (!self) return;
    if (!ec && self->client_.get() != redis)
      ec = std::make_error_code(std::errc::operation_canceled);
    if (ec) return failed(ec);
    send(redis);
  });
}

void DenialAudit::on_config() {
  if (!config_->limits.empty()) client();  // connected before the first denial
  if (config_->audit.redis_stream.empty() && !queue_.empty()) {
    metrics_.add("sluice_audit_dropped_total", "", static_cast<double>(queue_.size()));
    queue_.clear();
  }
}

void DenialAudit::denied(const Denial& denial) {
  if (closed_) return;
  counts_.add(denial.limit, denial.caller);
  if (!config_->audit.redis_stream.empty()) {
    if (queue_.size() >= kAuditQueueMax) {
      metrics_.add("sluice_audit_dropped_total", "");
    } else {
      queue_.push_back(denial);
    }
  }
  arm();
}

void DenialAudit::arm() {
  if (armed_ || closed_) return;
  armed_ = true;
  timer_.expires_after(kFlushInterval);
  timer_.async_wait([weak = weak_from_this()](std::error_code ec) {
    if (ec) return;
    if (auto self = weak.lock()) {
      self->armed_ = false;
      self->flush();
    }
  });
}

void DenialAudit::dropped_counts(std::uint64_t denials) {
  if (denials) metrics_.add("sluice_ratelimit_top_dropped_total", "", static_cast<double>(denials));
}

void DenialAudit::flush() {
  dropped_counts(counts_.dropped() - counts_dropped_seen_);
  counts_dropped_seen_ = counts_.dropped();
  if (counts_.empty() && queue_.empty()) return;
  if (in_flight_ > 0) return arm();  // Redis is slow: skip a round, keep noting
  if (!counts_.empty()) send_counts(counts_.take());
  send_stream();
  if (!queue_.empty()) arm();
}

// Per limit, the callers with the most denials (top_plan.hpp: at most
// kTopKept ZINCRBY, a trim and an EXPIRE), as plain commands pipelined in one
// write: the flush adds no script call to what Redis counts of the limiter's.
void DenialAudit::send_counts(std::vector<DenialCounts::Entry> entries) {
  std::map<std::string_view, std::vector<const DenialCounts::Entry*>> by_limit;
  for (const auto& e : entries) by_limit[e.limit].push_back(&e);
  const std::int64_t slot = unix_seconds() / kTopSlotSeconds;
  std::vector<std::vector<std::string>> commands;
  std::vector<std::uint64_t> denials;  // per command: what a failure loses
  std::uint64_t dropped = 0;
  for (auto& [limit, list] : by_limit) {
    TopFlush flush =
        top_flush_commands(top_slot_key(config_->redis.key_prefix, limit, slot), std::move(list));
    dropped += flush.dropped;
    std::move(flush.commands.begin(), flush.commands.end(), std::back_inserter(commands));
    denials.insert(denials.end(), flush.denials.begin(), flush.denials.end());
  }
  dropped_counts(dropped);
  send_all(std::move(commands), [weak = weak_from_this(), denials = std::move(denials)](
                                    std::size_t i, std::error_code ec) {
    if (auto self = weak.lock(); self && ec) self->dropped_counts(denials[i]);
  });
}

// One XADD per denial (exact MAXLEN trimming), plain commands as above.
void DenialAudit::send_stream() {
  if (queue_.empty()) return;
  const std::string& stream = config_->audit.redis_stream;
  if (stream.empty()) {
    metrics_.add("sluice_audit_dropped_total", "", static_cast<double>(queue_.size()));
    queue_.clear();
    return;
  }
  const std::string max_len = std::to_string(config_->audit.max_len);
  std::vector<std::vector<std::string>> commands;
  commands.reserve(queue_.size());
  for (auto& d : queue_) {
    commands.push_back({"XADD", stream, "MAXLEN", max_len, "*", "route", std::move(d.route),
                        "limit", std::move(d.limit), "consumer", std::move(d.caller), "plan",
                        std::move(d.plan), "retry_after_ms", std::to_string(d.retry_after_ms),
                        "instance", instance_});
  }
  queue_.clear();
  send_all(std::move(commands), [weak = weak_from_this()](std::size_t, std::error_code ec) {
    if (auto self = weak.lock()) {
      self->metrics_.add(ec ? "sluice_audit_dropped_total" : "sluice_audit_appended_total", "");
    }
  });
}

void DenialAudit::send_all(std::vector<std::vector<std::string>> commands,
                           std::function<void(std::size_t, std::error_code)> each) {
  if (commands.empty()) return;
  ++in_flight_;
  // One batch and one `each` shared by every command's handler: a handler
  // holds two pointers, never a copy of what `each` captured (a copy per
  // command made a flush of n commands cost n times its own size).
  struct Batch {
    std::vector<std::vector<std::string>> commands;
    std::function<void(std::size_t, std::error_code)> each;
    std::size_t left = 0;
  };
  auto batch = std::make_shared<Batch>(Batch{std::move(commands), std::move(each), 0});
  batch->left = batch->commands.size();
  auto failed = [weak = weak_from_this(), batch](std::error_code ec) {
    for (std::size_t i = 0; i < batch->commands.size(); ++i) batch->each(i, ec);
    if (auto self = weak.lock()) self->answered();
  };
  when_connected(
      [weak = weak_from_this(), batch](redis::Client* redis) {
        for (std::size_t i = 0; i < batch->commands.size(); ++i) {
          redis->keyed_command(std::move(batch->commands[i]),
                               [weak, batch, i](std::error_code ec, redis::Reply) {
                                 batch->each(i, ec);
                                 if (--batch->left > 0) return;
                                 if (auto self = weak.lock()) self->answered();
                               });
        }
      },
      failed);
}

// The read's commands are plain and pipelined (top_plan.hpp), each bounded
// by kTopKept members per set it touches: Redis serves others between them.
void DenialAudit::top(const std::string& limit, std::int64_t window_s, std::size_t n,
                      TopHandler done) {
  const std::string& prefix = config_->redis.key_prefix;
  auto commands = top_read_commands(top_scratch_key(prefix, instance_, next_top_read()),
                                    top_slot_keys(prefix, limit, unix_seconds(), window_s), n);
  struct Read {
    TopHandler done;
    std::size_t left = 0;
    std::error_code failed;
    std::vector<TopEntry> entries;
  };
  auto read = std::make_shared<Read>();
  read->done = std::move(done);
  read->left = commands.size();
  const std::size_t answer_at = commands.size() - 2;  // the ZRANGE
  when_connected(
      [commands = std::move(commands), read, answer_at](redis::Client* redis) mutable {
        for (std::size_t i = 0; i < commands.size(); ++i) {
          redis->keyed_command(
              std::move(commands[i]), [read, i, answer_at](std::error_code ec, redis::Reply reply) {
                if (!ec && reply.is_error()) ec = std::make_error_code(std::errc::protocol_error);
                if (ec && !read->failed) read->failed = ec;
                if (!ec && i == answer_at) {
                  for (std::size_t j = 0; j + 1 < reply.elements.size(); j += 2) {
                    const auto& score = reply.elements[j + 1].str;
                    read->entries.push_back(
                        {reply.elements[j].str, std::strtod(score.c_str(), nullptr)});
                  }
                }
                if (--read->left > 0) return;
                if (read->failed) return read->done(read->failed, {});
                read->done({}, std::move(read->entries));
              });
        }
      },
      [read](std::error_code ec) { read->done(ec, {}); });
}

void DenialAudit::answered() {
  --in_flight_;
  if (closed_ && in_flight_ == 0 && client_) client_->close();
}

void DenialAudit::close() {
  if (closed_) return;
  flush();  // what is noted goes out once; the connection closes when it is answered
  closed_ = true;
  timer_.cancel();
  if (client_ && in_flight_ == 0) client_->close();
}

}  // namespace sluice
