// The most-limited view's Redis commands (top_plan.hpp): every key under the
// key prefix with the {top} hash tag after it, a flush bounded to kTopKept
// callers per limit and trimming its set, and a read that merges a few slots
// per command into a scratch set trimmed back to kTopKept.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "middleware/ratelimit/audit/top_plan.hpp"

using namespace sluice;

namespace top_plan_test {

using Commands = std::vector<std::vector<std::string>>;

TEST_CASE("top slots: every 10-second slot a window overlaps, under the key prefix", "[audit]") {
  // now 1000 s: slot 100 holds [1000, 1010); a 60 s window is (940, 1000].
  const auto keys = top_slot_keys("sluice:", "l", 1000, 60);
  REQUIRE(keys.size() == 7);
  CHECK(keys.front() == "sluice:{top}:94:l");
  CHECK(keys.back() == "sluice:{top}:100:l");
  CHECK(top_slot_keys("p:", "l", 1009, 1) == std::vector<std::string>{"p:{top}:100:l"});
  CHECK(top_scratch_key("p:", "abc", 7) == "p:{top}:scratch:abc:7");
  // The whole window of an hour: 361 slots.
  CHECK(top_slot_keys("p:", "l", 100'000, kTopMaxWindowSeconds).size() == 361);
}

TEST_CASE("top flush: a few callers, each counted exactly, then trimmed and expired", "[audit]") {
  const std::vector<DenialCounts::Entry> entries{{"l", "x", 5}, {"l", "y", 1}};
  auto flush = top_flush_commands("k", {&entries[0], &entries[1]});
  CHECK(flush.commands == Commands{{"ZINCRBY", "k", "5", "x"},
                                   {"ZINCRBY", "k", "1", "y"},
                                   {"ZREMRANGEBYRANK", "k", "0", "-1001"},
                                   {"EXPIRE", "k", "3620"}});
  CHECK(flush.denials == std::vector<std::uint64_t>{5, 1, 0, 0});
  CHECK(flush.dropped == 0);
}

TEST_CASE("top flush: a flood of callers sends only the kTopKept most denied", "[audit]") {
  std::vector<DenialCounts::Entry> entries;
  for (std::size_t i = 0; i < 3 * kTopKept; ++i) {
    entries.push_back({"l", "c" + std::to_string(i), 1});
  }
  entries.push_back({"l", "heavy", 50});
  entries.push_back({"l", "medium", 7});
  std::vector<const DenialCounts::Entry*> list;
  for (const auto& e : entries) list.push_back(&e);
  auto flush = top_flush_commands("k", list);
  REQUIRE(flush.commands.size() == kTopKept + 2);
  std::uint64_t sent = 0;
  bool heavy = false;
  bool medium = false;
  for (std::size_t i = 0; i < kTopKept; ++i) {
    CHECK(flush.commands[i][0] == "ZINCRBY");
    sent += flush.denials[i];
    heavy = heavy || flush.commands[i][3] == "heavy";
    medium = medium || flush.commands[i][3] == "medium";
  }
  CHECK(heavy);
  CHECK(medium);
  // Every denial is either sent or dropped (and counted).
  CHECK(sent + flush.dropped == 3 * kTopKept + 57);
  CHECK(flush.dropped == 2 * kTopKept + 2);
}

TEST_CASE("top read: slots merged a few per command, trimmed after each merge", "[audit]") {
  const std::vector<std::string> slots{"s1", "s2", "s3", "s4", "s5", "s6"};
  static_assert(kTopMergeSlots == 4);
  const auto commands = top_read_commands("scr", slots, 20);
  CHECK(commands == Commands{{"ZUNIONSTORE", "scr", "4", "s1", "s2", "s3", "s4"},
                             {"ZREMRANGEBYRANK", "scr", "0", "-1001"},
                             {"PEXPIRE", "scr", "60000"},
                             {"ZUNIONSTORE", "scr", "3", "scr", "s5", "s6"},
                             {"ZREMRANGEBYRANK", "scr", "0", "-1001"},
                             {"PEXPIRE", "scr", "60000"},
                             {"ZRANGE", "scr", "0", "19", "REV", "WITHSCORES"},
                             {"DEL", "scr"}});
  // One slot: one merge.
  CHECK(top_read_commands("scr", {"s1"}, 1).front() ==
        std::vector<std::string>{"ZUNIONSTORE", "scr", "1", "s1"});
  // No command names more than kTopMergeSlots + 1 sets, whatever the window.
  const auto hour = top_read_commands("scr", top_slot_keys("p:", "l", 1000, 3600), 1000);
  for (const auto& c : hour) CHECK(c.size() <= 3 + kTopMergeSlots + 1);
  // Every merge (which drops the scratch key's TTL) is followed by a PEXPIRE
  // before the next command that could be the last one a cut-off read sent.
  for (std::size_t i = 0; i < hour.size(); ++i) {
    if (hour[i][0] != "ZUNIONSTORE") continue;
    REQUIRE(i + 2 < hour.size());
    CHECK(hour[i + 2][0] == "PEXPIRE");
  }
}

TEST_CASE("top read: reads on different workers at once get different scratch keys",
          "[audit]") {
  // Each worker's reads used to be numbered by its own counter, so the first
  // read on two workers both merged into "...scratch:<instance>:1".
  constexpr int kReads = 2000;
  std::vector<std::string> a, b;
  auto read = [](std::vector<std::string>& keys) {
    for (int i = 0; i < kReads; ++i) keys.push_back(top_scratch_key("p:", "inst", next_top_read()));
  };
  std::thread one([&] { read(a); });
  std::thread two([&] { read(b); });
  one.join();
  two.join();
  std::set<std::string> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  CHECK(all.size() == 2 * kReads);
  CHECK(a.front().rfind("p:{top}:scratch:inst:", 0) == 0);
}

}  // namespace top_plan_test
