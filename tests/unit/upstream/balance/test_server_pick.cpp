// The balance policies on their own: who is picked, in which proportions,
// and who never is.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "upstream/balance/maglev.hpp"
#include "upstream/balance/server_pick.hpp"
#include "upstream/balance/stable_hash.hpp"

namespace sluice {

TEST_CASE("round robin: smooth and weighted, as nginx's", "[balance]") {
  std::vector<PickServer> servers{{true, 5, 0}, {true, 1, 0}, {true, 1, 0}};
  std::vector<std::int64_t> current;
  std::string order;
  for (int i = 0; i < 7; ++i) order += static_cast<char>('a' + *pick_round_robin(servers, current));
  CHECK(order == "aabacaa");  // interleaved, not aaaaabc
  // Equal weights: plain round robin in order.
  std::vector<PickServer> equal{{true, 1, 0}, {true, 1, 0}, {true, 1, 0}};
  current.clear();
  order.clear();
  for (int i = 0; i < 6; ++i) order += static_cast<char>('a' + *pick_round_robin(equal, current));
  CHECK(order == "abcabc");
}

TEST_CASE("round robin: exact over every cycle, skipping who cannot take it", "[balance]") {
  std::vector<PickServer> servers{{true, 3, 0}, {true, 1, 0}, {false, 4, 0}};
  std::vector<std::int64_t> current;
  std::vector<int> count(3, 0);
  for (int i = 0; i < 400; ++i) ++count[*pick_round_robin(servers, current)];
  CHECK(count == std::vector<int>{300, 100, 0});
  for (auto& s : servers) s.usable = false;
  CHECK_FALSE(pick_round_robin(servers, current));
}

TEST_CASE("least request: the less loaded of two draws", "[balance]") {
  PickRandom random(42);
  std::vector<PickServer> servers{{true, 1, 10}, {true, 1, 0}};
  for (int i = 0; i < 100; ++i) CHECK(*pick_least_request(servers, random) == 1);
  // Weighted: 4 in flight at weight 4 is as loaded as 1 at weight 1.
  servers = {{true, 4, 7}, {true, 1, 2}};
  for (int i = 0; i < 100; ++i) CHECK(*pick_least_request(servers, random) == 0);
  // Only one usable: it, whatever its load.
  servers = {{true, 1, 100}, {false, 1, 0}};
  for (int i = 0; i < 20; ++i) CHECK(*pick_least_request(servers, random) == 0);
  // Equal loads: both are picked.
  servers = {{true, 1, 3}, {true, 1, 3}, {true, 1, 3}};
  std::vector<int> count(3, 0);
  for (int i = 0; i < 3000; ++i) ++count[*pick_least_request(servers, random)];
  for (const int c : count) CHECK(c > 800);
}

TEST_CASE("random: by weight, never an unusable server", "[balance]") {
  PickRandom random(7);
  std::vector<PickServer> servers{{true, 1, 0}, {false, 100, 0}, {true, 3, 0}};
  std::vector<int> count(3, 0);
  for (int i = 0; i < 40000; ++i) ++count[*pick_random(servers, random)];
  CHECK(count[1] == 0);
  CHECK(count[0] == Approx(10000).epsilon(0.05));
  CHECK(count[2] == Approx(30000).epsilon(0.05));
  for (int i = 0; i < 1000; ++i) CHECK(random.below(7) < 7);
}

TEST_CASE("hash: a key keeps its server; a missing server's keys go elsewhere", "[balance]") {
  std::vector<std::string> names{"a:1", "b:1", "c:1"};
  const MaglevTable table(names, {1, 1, 1});
  std::vector<PickServer> servers{{true, 1, 0}, {true, 1, 0}, {true, 1, 0}};
  std::map<int, std::size_t> first;
  for (int i = 0; i < 3000; ++i) {
    const auto key = stable_hash("k" + std::to_string(i));
    first[i] = *pick_hash(servers, table, key);
    CHECK(*pick_hash(servers, table, key) == first[i]);
  }
  servers[1].usable = false;  // b cannot take anything
  std::vector<int> of_b(3, 0);
  for (int i = 0; i < 3000; ++i) {
    const auto key = stable_hash("k" + std::to_string(i));
    const auto now = *pick_hash(servers, table, key);
    CHECK(now != 1);
    if (first[i] != 1) {
      CHECK(now == first[i]);  // the others stay
    } else {
      ++of_b[now];
    }
  }
  CHECK(of_b[0] > 300);  // b's keys spread over a and c
  CHECK(of_b[2] > 300);
  for (auto& s : servers) s.usable = false;
  CHECK_FALSE(pick_hash(servers, table, 1));
}

}  // namespace sluice
