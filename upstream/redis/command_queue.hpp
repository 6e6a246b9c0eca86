// The commands of one Redis connection awaiting their replies, in wire order:
// handshake commands, user commands with their deadlines, and abandoned ones
// (timed out, kept so that their late replies are matched and dropped), plus
// the NOSCRIPT retry rule. Pure: no sockets, no timers, no posting; time is
// passed in. Used on the client's executor only.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/circular_buffer.hpp>

#include "upstream/redis/client.hpp"

namespace sluice::redis {

class CommandQueue {
 public:
  using Clock = std::chrono::steady_clock;
  using Handler = Client::Handler;

  // kTime: the server's clock, asked at the handshake and every few seconds after.
  enum class Kind : std::uint8_t { kUser, kAuth, kSelect, kPing, kRole, kScriptLoad, kTime };

  // The arguments of an evalsha call, kept for a possible EVAL retry. Its
  // keys and arguments go back to the thread's spares when it ends (common/
  // spares.hpp), for the next call's caller to build them in.
  struct ScriptCall {
    std::shared_ptr<const std::string> body;
    std::string numkeys;
    std::vector<std::string> keys;
    std::vector<std::string> args;
    // Gets a non-error reply that comes after the call timed out (evalsha_late).
    std::shared_ptr<const Client::LateReplyHandler> late;

    ScriptCall() = default;
    ScriptCall(const ScriptCall&) = default;
    ScriptCall(ScriptCall&&) noexcept = default;
    ScriptCall& operator=(const ScriptCall&) = default;
    ScriptCall& operator=(ScriptCall&&) noexcept = default;
    ~ScriptCall();
  };
  // A new record, from the thread's block cache (upstream/block_allocator.hpp).
  static std::shared_ptr<ScriptCall> make_script_call();

  struct Entry {
    Kind kind = Kind::kUser;
    bool retried = false;  // an EVAL retry: it keeps the deadline of the first attempt
    Handler handler;       // kUser: empty once completed (abandoned: the reply is dropped)
    std::shared_ptr<ScriptCall> script;  // evalsha: NOSCRIPT is retried once with EVAL
    Clock::time_point enqueued{};
    Clock::time_point deadline = Clock::time_point::max();
  };

  // What a reply means for the entry it answers.
  enum class Action {
    kInternal,       // a handshake or SCRIPT LOAD reply: the client handles it
    kDropLate,       // the command timed out earlier: drop the reply
    kDeliver,        // success: the handler gets the reply
    kRetryWithEval,  // NOSCRIPT on a first evalsha attempt: send EVAL, same handler and deadline
    kNoScript,       // NOSCRIPT again (or not a script call): complete with kNoScript
    kServerError,    // another error reply: complete with kServer
  };
  static Action classify(const Entry& entry, const Reply& reply);

  // A handshake or SCRIPT LOAD command (no handler, no deadline).
  void push_internal(Kind kind, Clock::time_point now);
  // A user command; its deadline is now + timeout unless it is a retry or
  // the entry already has one.
  // Returns the deadline.
  Clock::time_point push_user(Entry entry, Clock::time_point now,
                              std::chrono::milliseconds timeout);

  bool empty() const { return entries_.empty(); }
  std::size_t size() const { return entries_.size(); }
  std::size_t abandoned() const { return abandoned_; }
  // When the oldest command still waiting was sent. Not empty() only.
  Clock::time_point oldest_enqueued() const { return entries_.front().enqueued; }

  // Removes the entry the next reply answers. Not empty() only.
  Entry pop_front();

  // Completes overdue user commands: each one's handler goes to
  // on_timeout(Handler&&) and the entry stays queued, abandoned (a script call
  // with a late handler keeps its arguments for it). Returns the
  // earliest deadline still pending (Clock::time_point::max() if none).
  template <class OnTimeout>
  Clock::time_point expire(Clock::time_point now, OnTimeout&& on_timeout) {
    auto next = Clock::time_point::max();
    for (Entry& entry : entries_) {
      if (!entry.handler) continue;
      if (entry.deadline <= now) {
        ++abandoned_;
        on_timeout(std::move(entry.handler));
        entry.handler = nullptr;
        if (entry.script && !entry.script->late) entry.script.reset();
      } else if (entry.deadline < next) {
        next = entry.deadline;
      }
    }
    return next;
  }

  // Hands every user handler still waiting to on_fail(Handler&&, bool sent),
  // then empties the queue; the last `unsent` entries (commands never handed
  // to the socket) with sent = false.
  template <class OnFail>
  void fail_all(OnFail&& on_fail, std::size_t unsent = 0) {
    const std::size_t first_unsent = entries_.size() - std::min(unsent, entries_.size());
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      Entry& entry = entries_[i];
      if (entry.kind == Kind::kUser && entry.handler) {
        on_fail(std::move(entry.handler), i < first_unsent);
      }
    }
    clear();
  }

  void clear() {
    entries_.clear();
    if (entries_.capacity() > kKeptCapacity) entries_.set_capacity(kKeptCapacity);
    abandoned_ = 0;
  }

 private:
  static constexpr std::size_t kKeptCapacity = 256;
  void push(Entry entry);

  // A ring, grown when full and never shrunk while commands are pending: a
  // deque would allocate and free a block every few commands.
  boost::circular_buffer<Entry> entries_;
  std::size_t abandoned_ = 0;
};

}  // namespace sluice::redis
