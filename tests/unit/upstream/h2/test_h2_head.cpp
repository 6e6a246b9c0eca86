#include <catch2/catch.hpp>

#include <string>

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
