// Reading a bucket for the admin API: bucket_read.lua's reply refilled by the
// token-bucket twin to the reply's server time.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "middleware/ratelimit/redis/bucket_admin.hpp"

namespace {

using sluice::redis::Reply;

Reply string_reply(std::string s) {
  Reply r;
  r.type = Reply::Type::kString;
  r.str = std::move(s);
  return r;
}

// A bucket_read.lua reply at `now_us` for a stored value.
Reply read_reply(std::int64_t now_us, std::string stored) {
  Reply r;
  r.type = Reply::Type::kArray;
  r.elements = {string_reply(std::to_string(now_us / 1'000'000)),
                string_reply(std::to_string(now_us % 1'000'000)), string_reply(std::move(stored))};
  return r;
}

std::string stored(double tokens, double timestamp_us) {
  std::string out(16, '\0');
  std::memcpy(out.data(), &tokens, 8);
  std::memcpy(out.data() + 8, &timestamp_us, 8);
  return out;
}

sluice::LimitDescriptor bucket() {
  sluice::LimitDescriptor d;
  d.limit = "per_key";
  d.capacity = 10;
  d.refill_per_second = 2;
  return d;
}

}  // namespace

TEST_CASE("bucket view: a stored bucket refilled to the server's time", "[admin][redis]") {
  const std::int64_t t0 = 1'700'000'000'000'000;
  // 4 tokens stored 1.5 s before: 4 + 1.5 * 2 = 7, full in (10 - 7) / 2 s.
  const auto view = sluice::bucket_view(bucket(), read_reply(t0 + 1'500'000, stored(4, t0)));
  REQUIRE(view);
  CHECK(view->exists);
  CHECK(view->tokens == Approx(7));
  CHECK(view->seconds_to_full == Approx(1.5));
  // Refilled past the capacity: full.
  const auto full = sluice::bucket_view(bucket(), read_reply(t0 + 60'000'000, stored(0, t0)));
  REQUIRE(full);
  CHECK(full->tokens == 10);
  CHECK(full->seconds_to_full == 0);
}

TEST_CASE("bucket view: an absent or malformed value is a full bucket", "[admin][redis]") {
  for (const std::string& value : {std::string(), std::string("garbage")}) {
    const auto view = sluice::bucket_view(bucket(), read_reply(1'000'000, value));
    REQUIRE(view);
    CHECK_FALSE(view->exists);
    CHECK(view->tokens == 10);
    CHECK(view->seconds_to_full == 0);
  }
}

TEST_CASE("bucket view: a reply of another shape is refused", "[admin][redis]") {
  Reply short_reply = read_reply(1'000'000, "");
  short_reply.elements.pop_back();
  CHECK_FALSE(sluice::bucket_view(bucket(), short_reply));
  Reply bad_time = read_reply(1'000'000, "");
  bad_time.elements[0] = string_reply("soon");
  CHECK_FALSE(sluice::bucket_view(bucket(), bad_time));
  CHECK_FALSE(sluice::bucket_view(bucket(), string_reply("x")));
}

TEST_CASE("bucket view: a sliding window slid to the server's time", "[admin][redis]") {
  sluice::LimitDescriptor window;
  window.limit = "per_minute";
  window.algorithm = sluice::LimitAlgorithm::kSlidingWindow;
  window.capacity = 100;
  window.window_seconds = 60;
  const std::int64_t w = 60'000'000;
  const std::int64_t index = 28'000'000;
  // Stored: window `index` counted 30, the one before 40. A quarter into the
  // next window: that window is the previous one, weighed 3/4: 100 - 22.5.
  std::string value(24, '\0');
  const double d[3] = {static_cast<double>(index), 30, 40};
  std::memcpy(value.data(), d, 24);
  const auto view = sluice::bucket_view(window, read_reply((index + 1) * w + w / 4, value));
  REQUIRE(view);
  CHECK(view->exists);
  CHECK(view->tokens == Approx(77.5));
  CHECK(view->seconds_to_full == Approx(45));
  // A token bucket's 16 bytes are not a window's state: not held, full.
  const auto other = sluice::bucket_view(window, read_reply(index * w, stored(4, 0)));
  REQUIRE(other);
  CHECK_FALSE(other->exists);
  CHECK(other->tokens == 100);
}
