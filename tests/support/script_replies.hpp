// Test helper: Redis replies as the token-bucket script gives them, for tests
// that complete a fake client's calls by hand.
#pragma once

#include "upstream/redis/reply.hpp"

namespace sluice::test {

inline redis::Reply integer_reply(long long value) {
  redis::Reply r;
  r.type = redis::Reply::Type::kInteger;
  r.integer = value;
  return r;
}

// The script's reply for one bucket: allowed, sufficient, and the raw doubles
// remaining, seconds_to_cost (0 when allowed, else 1) and seconds_to_full (1).
inline redis::Reply one_bucket_reply(bool allowed, double remaining) {
  redis::Reply numbers;
  numbers.type = redis::Reply::Type::kString;
  const double values[3] = {remaining, allowed ? 0.0 : 1.0, 1};
  numbers.str.assign(reinterpret_cast<const char*>(values), sizeof values);
  redis::Reply r;
  r.type = redis::Reply::Type::kArray;
  r.elements = {integer_reply(allowed ? 1 : 0), integer_reply(allowed ? 1 : 0), numbers};
  return r;
}

}  // namespace sluice::test
