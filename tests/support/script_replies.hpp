// Test helper: Redis replies built by hand (integers, strings, errors,
// arrays), and the token-bucket script's reply, for tests that complete a
// fake client's calls or feed parsers.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "upstream/redis/reply.hpp"

namespace sluice::test {

inline redis::Reply integer_reply(long long value) {
  redis::Reply r;
  r.type = redis::Reply::Type::kInteger;
  r.integer = value;
  return r;
}

// A string reply, or with `type` kError / kStatus an error or status reply.
inline redis::Reply text_reply(std::string text,
                               redis::Reply::Type type = redis::Reply::Type::kString) {
  redis::Reply r;
  r.type = type;
  r.str = std::move(text);
  return r;
}

inline redis::Reply array_reply(std::vector<redis::Reply> elements) {
  redis::Reply r;
  r.type = redis::Reply::Type::kArray;
  r.elements = std::move(elements);
  return r;
}

// The script's reply for one bucket: allowed, sufficient, and the raw doubles
// remaining, seconds_to_cost (0 when allowed, else 1), seconds_to_full (1),
// leased and wait (0).
// What the script answers for one enforced token bucket: one packed string,
// allowed + 2 * sufficient, then remaining, seconds_to_cost, seconds_to_full,
// leased and wait.
inline redis::Reply one_bucket_reply(bool allowed, double remaining, double leased = 0) {
  const double values[6] = {allowed ? 3.0 : 0.0, remaining, allowed ? 0.0 : 1.0, 1, leased, 0};
  redis::Reply r;
  r.type = redis::Reply::Type::kString;
  r.str.assign(reinterpret_cast<const char*>(values), sizeof values);
  return r;
}

// The same decision in the form of any other call: {allowed, sufficient, numbers}.
inline redis::Reply one_bucket_array_reply(bool allowed, double remaining, double leased = 0) {
  redis::Reply numbers;
  numbers.type = redis::Reply::Type::kString;
  const double values[5] = {remaining, allowed ? 0.0 : 1.0, 1, leased, 0};
  numbers.str.assign(reinterpret_cast<const char*>(values), sizeof values);
  redis::Reply r;
  r.type = redis::Reply::Type::kArray;
  r.elements = {integer_reply(allowed ? 1 : 0), integer_reply(allowed ? 1 : 0), numbers};
  return r;
}

// A decision call's arguments without its last, the deadline (which moves
// with the clock), so that a call can be compared with one encoded later.
inline std::vector<std::string> without_deadline(std::vector<std::string> args) {
  if (!args.empty()) args.pop_back();
  return args;
}

}  // namespace sluice::test
