#include "middleware/ratelimit/consumers/consumer_import.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "middleware/ratelimit/admin/admin_caller.hpp"

namespace sluice {
namespace {

namespace http = boost::beast::http;

enum class LineResult { kCreated, kReplaced, kUnchanged, kFailed };

// One import, on the admin thread; its lines go to `worker`, whose answers
// come back here.
class Import : public std::enable_shared_from_this<Import> {
 public:
  Import(std::string caller, std::shared_ptr<AdminBodyReader> body, AdminReply reply,
         ConsumerWorkers::Entry worker, std::vector<ConsumerWorkers::Entry> others)
      : caller_(std::move(caller)),
        body_(std::move(body)),
        reply_(std::move(reply)),
        worker_(std::move(worker)),
        others_(std::move(others)) {}

  void start() { read_more(); }

 private:
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
    for (char c : piece) {
      if (c == '\n') {
        end_line();
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
    if (done) {
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
      return fail(line_, "longer than 1 MiB");
    }
    std::string line = std::move(partial_);
    partial_.clear();
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) return;  // blank
    submit(line_, std::move(line));
  }

  void submit(std::size_t number, std::string line) {
    ++in_flight_;
    boost::asio::post(worker_.executor, [self = shared_from_this(), weak = worker_.worker, number,
                                         line = std::move(line)] {
      auto worker = weak.lock();
      if (!worker) return self->answered(number, LineResult::kFailed, "the worker stopped", {});
      ConsumerStore* store = worker->store();
      if (!store) {
        return self->answered(number, LineResult::kFailed, "the consumer store is off", {});
      }
      auto read = read_consumer_body(line, worker->config(), "");
      if (auto* bad = std::get_if<BodyProblem>(&read)) {
        return self->answered(number, LineResult::kFailed,
                              bad->field.empty() ? bad->detail : bad->field + ": " + bad->detail,
                              {});
      }
      store->put(std::get<StoredConsumer>(read), [self, worker, number](ConsumerWrite write) {
        for (const auto& fingerprint : write.changed) worker->resolver()->forget(fingerprint);
        switch (write.result) {
          case ConsumerWrite::Result::kCreated:
            return self->answered(number, LineResult::kCreated, {}, std::move(write.changed));
          case ConsumerWrite::Result::kReplaced:
            return self->answered(number, LineResult::kReplaced, {}, std::move(write.changed));
          case ConsumerWrite::Result::kUnchanged:
            return self->answered(number, LineResult::kUnchanged, {}, {});
          case ConsumerWrite::Result::kConflict:
            return self->answered(number, LineResult::kFailed,
                                  "keys[" + std::to_string(write.conflict_index) +
                                      "]: held by another consumer",
                                  {});
          case ConsumerWrite::Result::kError:
            break;
        }
        self->answered(number, LineResult::kFailed,
                       "the consumer store did not answer: " + write.error, {});
      });
    });
  }

  // On a worker: the line's outcome goes back to the admin thread.
  void answered(std::size_t number, LineResult result, std::string reason,
                std::vector<std::string> changed) {
    boost::asio::post(body_->executor(), [self = shared_from_this(), number, result,
                                          reason = std::move(reason),
                                          changed = std::move(changed)]() mutable {
      self->on_answer(number, result, std::move(reason), std::move(changed));
    });
  }

  void on_answer(std::size_t number, LineResult result, std::string reason,
                 std::vector<std::string> changed) {
    --in_flight_;
    switch (result) {
      case LineResult::kCreated:
        ++created_;
        break;
      case LineResult::kReplaced:
        ++replaced_;
        break;
      case LineResult::kUnchanged:
        ++unchanged_;
        break;
      case LineResult::kFailed:
        fail(number, std::move(reason));
        break;
    }
    // The other workers of this instance forget the changed keys too.
    if (!changed.empty()) {
      for (const auto& other : others_) {
        boost::asio::post(other.executor, [weak = other.worker, changed] {
          if (auto worker = weak.lock()) {
            for (const auto& fingerprint : changed) worker->resolver()->forget(fingerprint);
          }
        });
      }
    }
    if (!body_done_ && !cut_ && !reading_ && in_flight_ < kImportInFlight) return read_more();
    finish_if_done();
  }

  void fail(std::size_t number, std::string reason) {
    ++failed_count_;
    if (failed_.size() < kMaxListedFailures) {
      failed_.push_back({{"line", number}, {"reason", std::move(reason)}});
    }
  }

  void finish_if_done() {
    if (in_flight_ > 0 || !(body_done_ || cut_) || !reply_) return;
    spdlog::info(
        "admin: consumer import of {} lines: {} created, {} replaced, {} unchanged, {} failed ({})",
        line_, created_, replaced_, unchanged_, failed_count_, caller_);
    if (cut_) return;  // nobody to answer
    AdminReply reply = std::move(reply_);
    reply_ = nullptr;
    reply(json_response(http::status::ok, {{"created", created_},
                                           {"replaced", replaced_},
                                           {"unchanged", unchanged_},
                                           {"failed", failed_},
                                           {"failed_count", failed_count_}}));
  }

  std::string caller_;
  std::shared_ptr<AdminBodyReader> body_;
  AdminReply reply_;
  ConsumerWorkers::Entry worker_;
  std::vector<ConsumerWorkers::Entry> others_;
  std::string partial_;
  bool overlong_ = false;
  bool reading_ = false;
  bool body_done_ = false;
  bool cut_ = false;
  std::size_t line_ = 0;
  std::size_t in_flight_ = 0;
  std::size_t created_ = 0, replaced_ = 0, unchanged_ = 0, failed_count_ = 0;
  nlohmann::ordered_json failed_ = nlohmann::ordered_json::array();
};

}  // namespace

void add_consumer_import(AdminRoutes& routes, std::shared_ptr<ConsumerWorkers> workers) {
  routes.add_streaming(
      "/consumers/import",
      [workers = std::move(workers)](const AdminCall& call, std::shared_ptr<AdminBodyReader> body,
                                     AdminReply reply) {
        std::size_t chosen = 0;
        auto entries = workers->live(chosen);
        if (entries.empty()) {
          return reply(json_response(http::status::service_unavailable,
                                     {{"error", "no worker is serving"}}));
        }
        auto worker = entries[chosen];
        entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(chosen));
        std::make_shared<Import>(admin_caller(call), std::move(body), std::move(reply),
                                 std::move(worker), std::move(entries))
            ->start();
      });
}

}  // namespace sluice
