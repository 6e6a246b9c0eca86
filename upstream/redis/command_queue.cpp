#include "upstream/redis/command_queue.hpp"

#include <algorithm>

#include "common/spares.hpp"
#include "upstream/block_allocator.hpp"

namespace sluice::redis {

CommandQueue::ScriptCall::~ScriptCall() {
  keep_spare(std::move(keys));
  keep_spare(std::move(args));
}

std::shared_ptr<CommandQueue::ScriptCall> CommandQueue::make_script_call() {
  return std::allocate_shared<ScriptCall>(BlockAllocator<ScriptCall>{});
}

CommandQueue::Action CommandQueue::classify(const Entry& entry, const Reply& reply) {
  if (entry.kind != Kind::kUser) return Action::kInternal;
  if (!entry.handler) return Action::kDropLate;
  if (!reply.is_error()) return Action::kDeliver;
  // The script cache was flushed (SCRIPT FLUSH, restart, failover): one EVAL
  // runs and caches it, and the caller sees a single reply.
  const bool noscript = reply.str.starts_with("NOSCRIPT");
  if (noscript && entry.script && !entry.retried) return Action::kRetryWithEval;
  return noscript ? Action::kNoScript : Action::kServerError;
}

void CommandQueue::push_internal(Kind kind, Clock::time_point now) {
  Entry entry;
  entry.kind = kind;
  entry.enqueued = now;
  push(std::move(entry));
}

CommandQueue::Clock::time_point CommandQueue::push_user(Entry entry, Clock::time_point now,
                                                        std::chrono::milliseconds timeout) {
  entry.enqueued = now;
  // A retry keeps its first deadline, and a caller may have set one.
  if (!entry.retried && entry.deadline == Clock::time_point::max()) entry.deadline = now + timeout;
  const auto deadline = entry.deadline;
  push(std::move(entry));
  return deadline;
}

void CommandQueue::push(Entry entry) {
  if (entries_.full()) entries_.set_capacity(std::max<std::size_t>(16, 2 * entries_.capacity()));
  entries_.push_back(std::move(entry));
}

CommandQueue::Entry CommandQueue::pop_front() {
  Entry entry = std::move(entries_.front());
  entries_.pop_front();
  // A burst's ring goes back to the usual size once it has drained.
  if (entries_.empty() && entries_.capacity() > kKeptCapacity) {
    entries_.set_capacity(kKeptCapacity);
  }
  if (entry.kind == Kind::kUser && !entry.handler) --abandoned_;
  return entry;
}

}  // namespace sluice::redis
