// What consistent hashing costs a fleet when its servers change: the share of
// keys that move to another server when one of N servers is added or removed
// (Maglev, as upstreams.NAME.balance hash builds it; ideally 1/(N+1) and 1/N),
// and how close each server's share of the table is to its weight's.
//
//   sluice-balance-bench [KEYS]      (default 100000)
//
// Prints one line of JSON. For scripts/bench --balance, never for tests.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "upstream/balance/maglev.hpp"
#include "upstream/balance/stable_hash.hpp"

namespace {

using namespace sluice;

std::vector<std::string> names(std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back("10.0." + std::to_string(i / 250) + "." +
                                                    std::to_string(i % 250 + 1) + ":8080");
  return out;
}

double moved(const std::vector<std::string>& a, const std::vector<std::string>& b, int keys) {
  const MaglevTable ta(a, std::vector<unsigned>(a.size(), 1));
  const MaglevTable tb(b, std::vector<unsigned>(b.size(), 1));
  int n = 0;
  for (int i = 0; i < keys; ++i) {
    const auto key = stable_hash("user-" + std::to_string(i));
    n += a[ta.lookup(key)] != b[tb.lookup(key)];
  }
  return static_cast<double>(n) / keys;
}

}  // namespace

int main(int argc, char** argv) {
  const int keys = argc > 1 ? std::atoi(argv[1]) : 100000;
  if (keys <= 0) return 2;
  std::printf("{\"keys\": %d, \"remap\": [", keys);
  bool first = true;
  for (const std::size_t n : {3u, 5u, 10u, 20u, 50u}) {
    const auto before = names(n);
    const auto added = names(n + 1);
    const std::vector<std::string> removed(before.begin() + 1, before.end());
    std::printf("%s{\"servers\": %zu, \"added\": %.4f, \"removed\": %.4f}", first ? "" : ", ", n,
                moved(before, added, keys), moved(before, removed, keys));
    first = false;
  }
  // Weights 1, 2, 5: the table's share of each against 1/8, 2/8, 5/8.
  const auto three = names(3);
  const std::vector<unsigned> weights{1, 2, 5};
  const MaglevTable table(three, weights);
  std::vector<double> share(3, 0);
  for (std::uint64_t k = 0; k < MaglevTable::kSize; ++k) share[table.lookup(k)] += 1;
  double worst = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    const double want = weights[i] / 8.0;
    const double got = share[i] / MaglevTable::kSize;
    worst = std::max(worst, std::abs(got - want) / want);
  }
  std::printf("], \"weighted_worst_error\": %.5f}\n", worst);
  return 0;
}
