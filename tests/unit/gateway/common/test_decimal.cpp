#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <string>

#include "common/decimal.hpp"
#include "support/to_chars_text.hpp"

using sluice::test::to_chars_text;

TEST_CASE("decimal: appended as std::to_chars writes it, at every width and both limits",
          "[decimal]") {
  std::string out = "x=";
  sluice::append_decimal(out, std::uint64_t{0});
  CHECK(out == "x=0");
  std::uint64_t u = 1;  // 10^(digits - 1), up to 10^18 (no overflow on the way)
  for (int digits = 1; digits <= 19; ++digits) {
    const auto s = static_cast<std::int64_t>(u);
    for (std::uint64_t v : {u - 1, u, u + 7, u * 9}) {
      out.clear();
      sluice::append_decimal(out, v);
      CHECK(out == to_chars_text(v));
    }
    for (std::int64_t v : {s - 1, s, -s, -s + 1}) {
      out.clear();
      sluice::append_decimal(out, v);
      CHECK(out == to_chars_text(v));
    }
    if (digits < 19) u *= 10;
  }
  for (std::int64_t v :
       {std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()}) {
    out.clear();
    sluice::append_decimal(out, v);
    CHECK(out == to_chars_text(v));
  }
  out.clear();
  sluice::append_decimal(out, std::numeric_limits<std::uint64_t>::max());
  CHECK(out == "18446744073709551615");
}

TEST_CASE("decimal: digits put before an end, for a caller that frames them", "[decimal]") {
  char text[24];
  char* const end = text + sizeof text;
  char* start = sluice::put_decimal_before(end, 4096);
  CHECK(std::string(start, end) == "4096");
  start = sluice::put_decimal_before(end, 0);
  CHECK(std::string(start, end) == "0");
}

TEST_CASE("decimal: the number of digits at every power of ten, on both sides", "[decimal]") {
  CHECK(sluice::decimal_digits(0) == 1);
  std::uint64_t power = 1;
  for (std::size_t digits = 1; digits <= 20; ++digits) {
    CHECK(sluice::decimal_digits(power) == digits);
    if (power > 1) CHECK(sluice::decimal_digits(power - 1) == digits - 1);
    CHECK(sluice::decimal_digits(power + 1) == (power == 1 ? 1 : digits));
    if (digits < 20) power *= 10;
  }
  CHECK(sluice::decimal_digits(std::numeric_limits<std::uint64_t>::max()) == 20);
  for (std::uint64_t v : {7ULL, 99ULL, 12345ULL, 4294967296ULL, 999999999999ULL}) {
    CHECK(sluice::decimal_digits(v) == to_chars_text(v).size());
  }
}
