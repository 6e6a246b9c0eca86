// The consistent table: each server's share by its weight, the same key to
// the same server everywhere, and about 1/N of the keys moved when one of N
// servers comes or goes.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "upstream/balance/maglev.hpp"
#include "upstream/balance/stable_hash.hpp"

namespace sluice {
namespace {

std::vector<std::string> names(std::size_t n, std::size_t from = 0) {
  std::vector<std::string> out;
  for (std::size_t i = from; i < from + n; ++i) out.push_back("10.0.0." + std::to_string(i) + ":80");
  return out;
}

std::vector<std::size_t> shares(const MaglevTable& table, std::size_t servers) {
  std::vector<std::size_t> count(servers, 0);
  for (std::uint64_t k = 0; k < MaglevTable::kSize; ++k) ++count[table.lookup(k)];
  return count;
}

// The share of `keys` whose server (by name) differs between the tables.
double moved(const MaglevTable& a, const std::vector<std::string>& a_names, const MaglevTable& b,
             const std::vector<std::string>& b_names, int keys) {
  int n = 0;
  for (int i = 0; i < keys; ++i) {
    const auto key = stable_hash("user-" + std::to_string(i));
    n += a_names[a.lookup(key)] != b_names[b.lookup(key)];
  }
  return static_cast<double>(n) / keys;
}

}  // namespace

TEST_CASE("maglev: shares follow the weights", "[balance][maglev]") {
  const auto n = names(3);
  const MaglevTable equal(n, {1, 1, 1});
  for (const auto c : shares(equal, 3)) {
    CHECK(c == Approx(MaglevTable::kSize / 3.0).epsilon(0.01));
  }
  const MaglevTable weighted(n, {1, 2, 5});
  const auto c = shares(weighted, 3);
  CHECK(c[0] == Approx(MaglevTable::kSize / 8.0).epsilon(0.01));
  CHECK(c[1] == Approx(MaglevTable::kSize * 2 / 8.0).epsilon(0.01));
  CHECK(c[2] == Approx(MaglevTable::kSize * 5 / 8.0).epsilon(0.01));
}

TEST_CASE("maglev: the same servers make the same table, whatever their order",
          "[balance][maglev]") {
  auto n = names(5);
  const MaglevTable a(n, {1, 1, 1, 1, 1});
  const MaglevTable b(n, {1, 1, 1, 1, 1});
  std::vector<std::string> reversed(n.rbegin(), n.rend());
  const MaglevTable c(reversed, {1, 1, 1, 1, 1});
  for (int i = 0; i < 1000; ++i) {
    const auto key = stable_hash(std::to_string(i));
    CHECK(a.lookup(key) == b.lookup(key));
  }
  // By name, a reordered list moves few keys (ties in the filling order only).
  CHECK(moved(a, n, c, reversed, 10000) < 0.05);
}

TEST_CASE("maglev: a server added or removed moves about 1/N of the keys", "[balance][maglev]") {
  for (const std::size_t count : {4u, 10u}) {
    const auto before = names(count);
    const auto after = names(count + 1);
    const MaglevTable a(before, std::vector<unsigned>(count, 1));
    const MaglevTable b(after, std::vector<unsigned>(count + 1, 1));
    const double share = moved(a, before, b, after, 20000);
    INFO(count << " servers, one added: " << share << " of the keys moved");
    // Ideal: 1/(N+1); maglev adds a little disruption of its own.
    CHECK(share > 0.8 / (count + 1));
    CHECK(share < 1.3 / (count + 1));
    // One removed (the first): its keys move, and few others.
    const std::vector<std::string> fewer(before.begin() + 1, before.end());
    const MaglevTable c(fewer, std::vector<unsigned>(count - 1, 1));
    const double removed = moved(a, before, c, fewer, 20000);
    INFO("one removed: " << removed);
    CHECK(removed < 1.3 / count);
  }
}

TEST_CASE("maglev: a key's later choices spread, the first stays", "[balance][maglev]") {
  const auto n = names(4);
  const MaglevTable table(n, {1, 1, 1, 1});
  std::vector<int> second(4, 0);
  int differs = 0;
  for (int i = 0; i < 4000; ++i) {
    const auto key = stable_hash(std::to_string(i));
    CHECK(table.lookup(key, 0) == table.lookup(key));
    ++second[table.lookup(key, 1)];
    differs += table.lookup(key, 1) != table.lookup(key);
  }
  for (const int c : second) CHECK(c > 800);
  CHECK(differs > 2500);
}

TEST_CASE("stable hash: fixed values", "[balance]") {
  // The same on every machine, run and version: a fleet (and a fleet being
  // upgraded) agrees on each key's server. These values never change.
  STATIC_REQUIRE(stable_hash("user-1") == 0xc499b5f8a721df58ULL);
  STATIC_REQUIRE(stable_hash("") == 0xf52a15e9a9b5e89bULL);
  CHECK(stable_hash("abc") != stable_hash("abd"));
  CHECK(stable_hash("abc", 1) != stable_hash("abc", 2));
}

}  // namespace sluice
