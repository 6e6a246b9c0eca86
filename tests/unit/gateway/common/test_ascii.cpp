// The shared ASCII and hex helpers.
#include <catch2/catch.hpp>

#include <array>
#include <string>
#include <vector>

#include "common/ascii.hpp"
#include "common/hex.hpp"

namespace sluice {
namespace {

TEST_CASE("ascii: classes and case folding touch ASCII only", "[common]") {
  CHECK(ascii::is_digit('0'));
  CHECK_FALSE(ascii::is_digit('a'));
  CHECK(ascii::is_alpha('Z'));
  CHECK_FALSE(ascii::is_alpha('\xc3'));
  CHECK(ascii::to_lower('Q') == 'q');
  CHECK(ascii::to_upper('q') == 'Q');
  CHECK(ascii::to_lower('\xc4') == '\xc4');
  std::string s = "GeT/\xc4";
  ascii::to_upper_in_place(s);
  CHECK(s == "GET/\xc4");
  ascii::to_lower_in_place(s);
  CHECK(s == "get/\xc4");
  CHECK(ascii::all_digits("0123"));
  CHECK_FALSE(ascii::all_digits(""));
  CHECK_FALSE(ascii::all_digits("12a"));
}

TEST_CASE("ascii: folding eight bytes at a time changes what one at a time does, and no more",
          "[common]") {
  // Every byte value, at every place of every length up to three words and a
  // bit, beside bytes either side that must stay as they were.
  for (std::size_t n = 0; n <= 27; ++n) {
    for (std::size_t at = 0; at < std::max<std::size_t>(n, 1); ++at) {
      for (int b = 0; b < 256; ++b) {
        std::string text(n + 2, '\xff');
        for (std::size_t i = 0; i < n; ++i) text[1 + i] = static_cast<char>("Ab@[`{Zz"[i % 8]);
        if (n > 0) text[1 + at] = static_cast<char>(b);
        std::string expected = text;
        for (std::size_t i = 1; i <= n; ++i) expected[i] = ascii::to_lower(expected[i]);
        ascii::to_lower_in_place(text.data() + 1, n);
        if (text != expected) {
          FAIL("length " << n << ", byte " << b << " at " << at);
        }
      }
    }
  }
  SUCCEED();
}

TEST_CASE("ascii: iequals and trim", "[common]") {
  CHECK(ascii::iequals("Authorization", "aUTHORIZATION"));
  CHECK_FALSE(ascii::iequals("chunked", "chunked "));
  CHECK(ascii::iequals("", ""));
  CHECK(ascii::trim(" \t a b \t") == "a b");
  CHECK(ascii::trim(" \t ").empty());
  CHECK(ascii::trim("\na\r") == "\na\r");  // only spaces and tabs
}

TEST_CASE("hex: digit values and lower-case encoding", "[common]") {
  CHECK(hex::digit_value('0') == 0);
  CHECK(hex::digit_value('a') == 10);
  CHECK(hex::digit_value('F') == 15);
  CHECK(hex::digit_value('g') == -1);
  const std::array<unsigned char, 4> bytes = {0x00, 0x0f, 0xab, 0xff};
  CHECK(hex::encode(bytes) == "000fabff");
  std::string out = "x";
  hex::append_byte(out, 0x7f);
  CHECK(out == "x7f");
  hex::append_byte_upper(out, 0xab);
  CHECK(out == "x7fAB");
  CHECK(hex::digit(0x1a) == 'a');  // the low four bits
  CHECK(hex::upper_digit(0xc) == 'C');
}

TEST_CASE("hex: append writes every byte, also past one run of its buffer", "[common]") {
  std::vector<unsigned char> bytes(100);
  std::string expected = "key:";
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<unsigned char>(i * 37 + 5);
    hex::append_byte(expected, bytes[i]);
  }
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{16}, std::size_t{32},
                              std::size_t{33}, std::size_t{64}, std::size_t{100}}) {
    std::string out = "key:";
    hex::append(out, std::span<const unsigned char>(bytes).first(n));
    CHECK(out == expected.substr(0, 4 + 2 * n));
  }
}

TEST_CASE("hex: the value of a two-digit pair", "[common]") {
  CHECK(hex::pair_value("2F") == 0x2f);
  CHECK(hex::pair_value("ff/") == 0xff);  // only the first two count
  CHECK(hex::pair_value("2") == -1);
  CHECK(hex::pair_value("") == -1);
  CHECK(hex::pair_value("2g") == -1);
  CHECK(hex::pair_value("x2") == -1);
}

}  // namespace
}  // namespace sluice
