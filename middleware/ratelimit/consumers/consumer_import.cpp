#include "middleware/ratelimit/consumers/consumer_import.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>

#include "middleware/ratelimit/admin/admin_caller.hpp"
#include "middleware/ratelimit/redis/redis_rate_limiter.hpp"
#include "upstream/redis/client_factory.hpp"

namespace sluice {
namespace {

namespace http = boost::beast::http;

// Changed fingerprints handed to the workers at once (and whenever no line
// is in flight).
constexpr std::size_t kForgetBatch = 256;

// A list of lines (failed or unknown) and how many there were in all.
struct LineList {
  nlohmann::ordered_json listed = nlohmann::ordered_json::array();
  std::size_t count = 0;

  void add(std::size_t number, std::string reason) {
    ++count;
    if (listed.size() < kMaxListedFailures) {
      listed.push_back({{"line", number}, {"reason", std::move(reason)}});
    }
  }
};

// One import, on the admin thread from start to end: its body, its lines,
// its own connection to the store.
class Import : public std::enable_shared_from_this<Import> {
 public:
  Import(std::string caller, std::shared_ptr<AdminBodyReader> body, AdminReply reply,
         std::shared_ptr<const Config> config, std::vector<ConsumerWorkers::Entry> workers)
      : caller_(std::move(caller)),
        body_(std::move(body)),
        reply_(std::move(reply)),
        config_(std::move(config)),
        workers_(std::move(workers)) {}

  // Connects to the store, then reads the body; an import that cannot
  // connect is answered 503 before any of its body is read.
  void start() {
    if (config_->api_keys.store != ApiKeysConfig::Store::kRedis) {
      return refuse("the consumer store is off (api_keys.store is not redis)");
    }
    client_ = redis::client_factory(body_->executor())(redis_options(config_->redis));
    store_ = std::make_unique<ConsumerStore>(*client_, config_->redis.key_prefix);
    store_->load_scripts();
    client_->connect([self = shared_from_this()](std::error_code ec) {
      if (ec) return self->refuse("the consumer store did not answer: " + ec.message());
      self->read_more();
    });
  }

 private:
  void refuse(const std::string& detail) {
    close_store();
    AdminReply reply = std::move(reply_);
    reply_ = nullptr;
    reply(problem_response(503, detail));
  }

  void read_more() {
    reading_ = true;
    body_->read([self = shared_from_this()](std::error_code ec, std::string piece, bool done) {
      self->on_piece(ec, std::move(piece), done);
    });
  }

  void on_piece(std::error_code ec, std::string piece, bool done) {
    reading_ = false;
    if (ec) {
      // Cut short: the partial line is dropped; lines under way still land.
      cut_ = true;
      spdlog::warn("admin: consumer import cut short after line {} ({}; {})", line_, ec.message(),
                   caller_);
      return finish_if_done();
    }
    piece_ = std::move(piece);
    at_ = 0;
    holding_ = true;
    last_piece_ = done;
    scan();
  }

  // Turns the piece held into lines, in this turn until the piece ends, or
  // kImportInFlight lines are in flight (on_write goes on when one comes
  // back), or this turn took kImportInFlight lines (a posted turn goes on):
  // the admin thread also accepts connections, and a 64 KiB piece may hold
  // hundreds of lines.
  void scan() {
    if (!holding_) return;
    std::size_t lines = 0;
    while (at_ < piece_.size()) {
      if (in_flight_ >= kImportInFlight) return;
      if (lines >= kImportInFlight) {
        if (!scan_posted_) {
          scan_posted_ = true;
          boost::asio::post(body_->executor(), [self = shared_from_this()] {
            self->scan_posted_ = false;
            self->scan();
          });
        }
        return;
      }
      const char c = piece_[at_++];
      if (c == '\n') {
        end_line();
        ++lines;
      } else if (!overlong_) {
        if (partial_.size() >= kMaxImportLine) {
          overlong_ = true;
          partial_.clear();
          partial_.shrink_to_fit();
        } else {
          partial_ += c;
        }
      }
    }
    holding_ = false;
    piece_.clear();
    if (last_piece_) {
      if (!partial_.empty() || overlong_) end_line();
      body_done_ = true;
      return finish_if_done();
    }
    if (in_flight_ < kImportInFlight) read_more();
  }

  void end_line() {
    ++line_;
    if (overlong_) {
      overlong_ = false;
      return failed_.add(line_, "longer than 1 MiB");
    }
    std::string line = std::move(partial_);
    partial_.clear();
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) return;  // blank
    submit(line_, line);
  }

  void submit(std::size_t number, std::string_view line) {
    auto read = read_consumer_body(line, *config_, "");
    if (auto* bad = std::get_if<BodyProblem>(&read)) {
      return failed_.add(number,
                         bad->field.empty() ? bad->detail : bad->field + ": " + bad->detail);
    }
    ++in_flight_;
    store_->put(std::get<StoredConsumer>(read),
                [self = shared_from_this(), number](ConsumerWrite write) {
                  self->on_write(number, std::move(write));
                });
  }

  void on_write(std::size_t number, ConsumerWrite write) {
    --in_flight_;
    switch (write.result) {
      case ConsumerWrite::Result::kCreated:
        ++created_;
        break;
      case ConsumerWrite::Result::kReplaced:
        ++replaced_;
        break;
      case ConsumerWrite::Result::kUnchanged:
        ++unchanged_;
        break;
      case ConsumerWrite::Result::kConflict:
        failed_.add(number,
                    "keys[" + std::to_string(write.conflict_index) + "]: held by another consumer");
        break;
      case ConsumerWrite::Result::kUnknown:
        unknown_.add(number, "the consumer store did not answer (" + write.error +
                                 "): it may have been written");
        break;
      case ConsumerWrite::Result::kError:
        failed_.add(number, "the consumer store did not answer: " + write.error);
        break;
    }
    for (auto& fingerprint : write.changed) changed_.push_back(std::move(fingerprint));
    if (changed_.size() >= kForgetBatch || in_flight_ == 0) forget_changed();
    if (holding_) return scan();
    if (!body_done_ && !cut_ && !reading_ && in_flight_ < kImportInFlight) return read_more();
    finish_if_done();
  }

  // Every worker of this instance forgets the keys changed so far: one post
  // per worker for a batch of lines, not one per line.
  void forget_changed() {
    if (changed_.empty()) return;
    auto changed = std::make_shared<const std::vector<std::string>>(std::move(changed_));
    changed_.clear();
    for (const auto& worker : workers_) {
      boost::asio::post(worker.executor, [weak = worker.worker, changed] {
        if (auto live = weak.lock()) {
          for (const auto& fingerprint : *changed) live->resolver()->forget(fingerprint);
        }
      });
    }
  }

  void finish_if_done() {
    if (in_flight_ > 0 || !(body_done_ || cut_) || !reply_) return;
    close_store();
    spdlog::info(
        "admin: consumer import of {} lines: {} created, {} replaced, {} unchanged, {} failed, {} "
        "unknown ({})",
        line_, created_, replaced_, unchanged_, failed_.count, unknown_.count, caller_);
    AdminReply reply = std::move(reply_);
    reply_ = nullptr;
    if (cut_) return;  // nobody to answer
    reply(json_response(http::status::ok, {{"created", created_},
                                           {"replaced", replaced_},
                                           {"unchanged", unchanged_},
                                           {"failed", std::move(failed_.listed)},
                                           {"failed_count", failed_.count},
                                           {"unknown", std::move(unknown_.listed)},
                                           {"unknown_count", unknown_.count}}));
  }

  // The connection ends with the import. The client goes in a later turn of
  // the loop, never inside one of its own completions.
  void close_store() {
    if (!client_) return;
    client_->close();
    store_.reset();
    boost::asio::post(body_->executor(),
                      [client = std::shared_ptr<redis::Client>(std::move(client_))] {});
  }

  std::string caller_;
  std::shared_ptr<AdminBodyReader> body_;
  AdminReply reply_;
  std::shared_ptr<const Config> config_;
  std::vector<ConsumerWorkers::Entry> workers_;
  std::unique_ptr<redis::Client> client_;
  std::unique_ptr<ConsumerStore> store_;
  std::vector<std::string> changed_;  // fingerprints the workers have not forgotten yet
  std::string piece_;  // the piece being turned into lines, from at_
  std::size_t at_ = 0;
  bool holding_ = false;     // piece_ is not all taken yet
  bool last_piece_ = false;  // piece_ ends the body
  bool scan_posted_ = false;
  std::string partial_;
  bool overlong_ = false;
  bool reading_ = false;
  bool body_done_ = false;
  bool cut_ = false;
  std::size_t line_ = 0;
  std::size_t in_flight_ = 0;
  std::size_t created_ = 0, replaced_ = 0, unchanged_ = 0;
  LineList failed_;
  LineList unknown_;
};

}  // namespace

void add_consumer_import(AdminRoutes& routes, std::shared_ptr<ConsumerWorkers> workers) {
  routes.add_streaming(
      "/consumers/import", "application/x-ndjson",
      [workers = std::move(workers)](const AdminCall& call, std::shared_ptr<AdminBodyReader> body,
                                     AdminReply reply) {
        std::size_t chosen = 0;
        auto entries = workers->live(chosen);
        if (entries.empty() || !call.config) {
          return reply(problem_response(503, "no worker is serving"));
        }
        std::make_shared<Import>(admin_caller(call), std::move(body), std::move(reply), call.config,
                                 std::move(entries))
            ->start();
      });
}

}  // namespace sluice
