#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <string>

#include "common/text_writer.hpp"
#include "support/to_chars_text.hpp"

using sluice::test::to_chars_text;

TEST_CASE("text writer: appends after what the string held, and keeps only what it wrote",
          "[text_writer]") {
  std::string out = "policy=";
  {
    sluice::TextWriter w(out, 64);
    w.put("\"a\"");
    w.put(';');
    w.put("q=");
    w.decimal(100);
    CHECK(out.size() == 7 + 64);  // room made once
  }
  CHECK(out == "policy=\"a\";q=100");
  {
    sluice::TextWriter w(out, 0);  // nothing to write
  }
  CHECK(out == "policy=\"a\";q=100");
}

TEST_CASE("text writer: decimals as std::to_chars writes them, at every width",
          "[text_writer]") {
  std::uint64_t u = 1;
  for (int digits = 1; digits <= 20; ++digits) {
    for (std::uint64_t v : {u - 1, u, u + 7}) {
      std::string out;
      {
        sluice::TextWriter w(out, sluice::TextWriter::kDecimalBound);
        w.decimal(v);
      }
      CHECK(out == to_chars_text(v));
    }
    if (digits < 20) u *= 10;
  }
  std::string out;
  {
    sluice::TextWriter w(out, sluice::TextWriter::kDecimalBound);
    w.decimal(std::numeric_limits<std::uint64_t>::max());
  }
  CHECK(out == "18446744073709551615");
}
