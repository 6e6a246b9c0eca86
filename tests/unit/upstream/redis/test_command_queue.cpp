// The pure command queue of a Redis connection: wire order, deadlines,
// abandoned commands and the NOSCRIPT retry rule, with time passed in.
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <vector>

#include "upstream/redis/command_queue.hpp"

namespace {

using namespace std::chrono_literals;
using sluice::redis::CommandQueue;
using sluice::redis::Reply;
using Action = CommandQueue::Action;
using Clock = CommandQueue::Clock;

CommandQueue::Entry user_entry(int* completions = nullptr) {
  CommandQueue::Entry entry;
  entry.handler = [completions](std::error_code, Reply) {
    if (completions) ++*completions;
  };
  return entry;
}

Reply error_reply(std::string text) {
  Reply r;
  r.type = Reply::Type::kError;
  r.str = std::move(text);
  return r;
}

}  // namespace

TEST_CASE("command queue: replies match commands in wire order", "[redis][queue]") {
  CommandQueue queue;
  const auto t0 = Clock::now();
  queue.push_internal(CommandQueue::Kind::kPing, t0);
  CHECK(queue.push_user(user_entry(), t0 + 1ms, 50ms) == t0 + 51ms);
  REQUIRE(queue.size() == 2);
  CHECK(queue.oldest_enqueued() == t0);
  CHECK(queue.pop_front().kind == CommandQueue::Kind::kPing);
  CHECK(queue.pop_front().kind == CommandQueue::Kind::kUser);
  CHECK(queue.empty());
}

TEST_CASE("command queue: overdue commands time out and stay queued, abandoned", "[redis][queue]") {
  CommandQueue queue;
  const auto t0 = Clock::now();
  queue.push_user(user_entry(), t0, 50ms);
  queue.push_user(user_entry(), t0 + 10ms, 50ms);
  int timed_out = 0;
  auto on_timeout = [&](CommandQueue::Handler&& handler) {
    CHECK(handler);
    ++timed_out;
  };
  CHECK(queue.expire(t0 + 49ms, on_timeout) == t0 + 50ms);
  CHECK(timed_out == 0);
  CHECK(queue.expire(t0 + 50ms, on_timeout) == t0 + 60ms);
  CHECK(timed_out == 1);
  CHECK(queue.abandoned() == 1);
  CHECK(queue.size() == 2);
  // Its late reply is matched and dropped.
  const auto late = queue.pop_front();
  CHECK(CommandQueue::classify(late, Reply{}) == Action::kDropLate);
  CHECK(queue.abandoned() == 0);
  CHECK(queue.expire(t0 + 60ms, on_timeout) == Clock::time_point::max());
  CHECK(timed_out == 2);
}

TEST_CASE("command queue: a retry keeps the first attempt's deadline", "[redis][queue]") {
  CommandQueue queue;
  const auto t0 = Clock::now();
  auto entry = user_entry();
  entry.retried = true;
  entry.deadline = t0 + 50ms;
  CHECK(queue.push_user(std::move(entry), t0 + 30ms, 50ms) == t0 + 50ms);
}

TEST_CASE("command queue: fail_all completes every waiting user command once", "[redis][queue]") {
  CommandQueue queue;
  const auto t0 = Clock::now();
  queue.push_internal(CommandQueue::Kind::kAuth, t0);
  queue.push_user(user_entry(), t0, 50ms);
  queue.push_user(user_entry(), t0, 10ms);
  queue.expire(t0 + 20ms, [](CommandQueue::Handler&&) {});  // one abandoned
  int failed = 0;
  queue.fail_all([&](CommandQueue::Handler&&, bool) { ++failed; });
  CHECK(failed == 1);
  CHECK(queue.empty());
  CHECK(queue.abandoned() == 0);
}

TEST_CASE("command queue: the commands never written are told apart", "[redis][queue]") {
  CommandQueue queue;
  const auto t0 = Clock::now();
  for (int i = 0; i < 4; ++i) queue.push_user(user_entry(), t0, 50ms);
  std::vector<bool> sent;
  queue.fail_all([&](CommandQueue::Handler&&, bool was_sent) { sent.push_back(was_sent); }, 3);
  CHECK(sent == std::vector<bool>{true, false, false, false});
}

TEST_CASE("command queue: NOSCRIPT is retried once with EVAL, for script calls only",
          "[redis][queue][noscript]") {
  auto call = user_entry();
  call.script = std::make_shared<CommandQueue::ScriptCall>();
  const Reply noscript = error_reply("NOSCRIPT No matching script.");
  CHECK(CommandQueue::classify(call, noscript) == Action::kRetryWithEval);
  call.retried = true;
  CHECK(CommandQueue::classify(call, noscript) == Action::kNoScript);
  CHECK(CommandQueue::classify(user_entry(), noscript) == Action::kNoScript);
  CHECK(CommandQueue::classify(user_entry(), error_reply("ERR wrong")) == Action::kServerError);
  CHECK(CommandQueue::classify(user_entry(), Reply{}) == Action::kDeliver);
  CommandQueue::Entry internal;
  internal.kind = CommandQueue::Kind::kScriptLoad;
  CHECK(CommandQueue::classify(internal, noscript) == Action::kInternal);
}
