#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "common/spares.hpp"
#include "upstream/h2/h2_head.hpp"
#include "upstream/h2/h2_header_block.hpp"

using namespace sluice;

TEST_CASE("A :status value is a three-digit code", "[h2]") {
  CHECK(h2_status("200") == 200u);
  CHECK(h2_status("103") == 103u);
  CHECK_FALSE(h2_status("20"));
  CHECK_FALSE(h2_status("2000"));
  CHECK_FALSE(h2_status("abc"));
  CHECK_FALSE(h2_status("099"));
}

TEST_CASE("A content-length value is digits only", "[h2]") {
  CHECK(h2_content_length("0") == 0u);
  CHECK(h2_content_length("1048576") == 1048576u);
  CHECK(h2_content_length("18446744073709551615") == 18446744073709551615u);
  CHECK_FALSE(h2_content_length(""));
  CHECK_FALSE(h2_content_length("-1"));
  CHECK_FALSE(h2_content_length("+1"));
  CHECK_FALSE(h2_content_length(" 1"));
  CHECK_FALSE(h2_content_length("1,1"));
  CHECK_FALSE(h2_content_length("12abc"));
  CHECK_FALSE(h2_content_length("18446744073709551616"));  // past 2^64 - 1
}

TEST_CASE("Trailers go in lower case, without connection fields, TE or Host", "[h2]") {
  sluice::HttpFields trailers;
  trailers.insert("X-Checksum", "abc");
  trailers.insert("Connection", "close");
  trailers.insert("TE", "trailers");
  trailers.insert("Host", "example.com");
  H2HeaderBlock out{{"x-before", "gone"}};  // cleared first
  h2_trailer_fields(out, trailers);
  REQUIRE(out.size() == 1);
  CHECK(out[0].first == "x-checksum");
  CHECK(out[0].second == "abc");
}

TEST_CASE("A header block that goes leaves its buffers to the next block", "[h2]") {
  if (!Spares<std::string>::kKeeps) return;  // nothing is kept under AddressSanitizer
  const std::string value(200, 'v');
  const char* bytes = nullptr;
  const nghttp2_nv* list = nullptr;
  {
    H2HeaderBlock first;
    first.add("X-First", value);
    first.add("x-second", "2");
    bytes = first.field(0).first.data();
    list = first.nva().data();
  }
  H2HeaderBlock next;
  next.add("X-Next", "n");
  CHECK(next.field(0).first.data() == bytes);  // the same buffer, emptied
  CHECK(next.field(0) == H2HeaderBlock::Field{"x-next", "n"});
  CHECK(next.size() == 1);
  const auto nva = next.nva(":status");
  CHECK(nva.data() == list);
  CHECK(nva.size() == 2);
}

TEST_CASE("A header block keeps its fields as it grows, and when copied or moved", "[h2]") {
  H2HeaderBlock block;
  std::vector<std::string> values;
  for (int i = 0; i < 40; ++i) {
    values.emplace_back(static_cast<std::size_t>(i * 7), static_cast<char>('a' + i % 26));
    block.add("X-Field-" + std::to_string(i), values.back());
  }
  REQUIRE(block.size() == 40);
  for (int i = 0; i < 40; ++i) {
    const auto [name, value] = block.field(static_cast<std::size_t>(i));
    CHECK(name == "x-field-" + std::to_string(i));
    CHECK(value == values[static_cast<std::size_t>(i)]);
  }
  const auto nva = block.nva();
  REQUIRE(nva.size() == 40);
  CHECK(std::string_view(reinterpret_cast<const char*>(nva[39].value), nva[39].valuelen) ==
        values[39]);

  H2HeaderBlock copy(block);
  CHECK(copy == block);
  copy.add("x-more", "1");
  CHECK(copy.size() == 41);
  CHECK(copy.field(40) == H2HeaderBlock::Field{"x-more", "1"});

  H2HeaderBlock moved(std::move(block));
  CHECK(moved.size() == 40);
  CHECK(moved.field(39).second == values[39]);
  // The block moved from is empty and takes fields again.
  block.clear();
  block.add("X-Again", "yes");
  CHECK(block.size() == 1);
  CHECK(block.field(0) == H2HeaderBlock::Field{"x-again", "yes"});

  H2HeaderBlock assigned;
  assigned.add("x-old", "gone");
  assigned = copy;
  CHECK(assigned == copy);
  assigned = std::move(moved);
  CHECK(assigned.size() == 40);
  CHECK(assigned.field(0) == H2HeaderBlock::Field{"x-field-0", ""});
}
