// Seeding a connection's HPACK table with the names of the fields sent never
// indexed: with nghttp2's own encoder, the blocks after a seed carry such a
// name as an index (the value alone literal) and add nothing to the table.
#include <catch2/catch.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nghttp2/nghttp2.h>

#include "upstream/h2/h2_header_block.hpp"
#include "upstream/h2/h2_name_seeds.hpp"

namespace {

// What one block encodes to with `deflater`.
std::size_t encoded_size(nghttp2_hd_deflater* deflater, std::span<const nghttp2_nv> nva) {
  std::vector<std::uint8_t> out(4096);
  const auto n = nghttp2_hd_deflate_hd(deflater, out.data(), out.size(),
                                       const_cast<nghttp2_nv*>(nva.data()), nva.size());
  REQUIRE(n > 0);
  return static_cast<std::size_t>(n);
}

sluice::H2HeaderBlock response(std::string remaining) {
  return {{"X-RateLimit-Limit", "1000"}, {"X-RateLimit-Remaining", remaining},
          {"RateLimit", "\"api\";r=" + remaining + ";t=1"}};
}

}  // namespace

TEST_CASE("HTTP/2 name seeds: the first block of a connection, then every kEvery-th",
          "[h2][name_seeds]") {
  sluice::H2NameSeeds seeds;
  std::vector<int> seeding;
  for (int i = 0; i < 3 * static_cast<int>(sluice::H2NameSeeds::kEvery); ++i) {
    if (seeds.next()) seeding.push_back(i);
  }
  const int every = static_cast<int>(sluice::H2NameSeeds::kEvery);
  CHECK(seeding == std::vector<int>{0, every, 2 * every});
}

TEST_CASE("HTTP/2 name seeds: after a seed, changing fields go with an indexed name",
          "[h2][name_seeds]") {
  nghttp2_hd_deflater* seeded = nullptr;
  nghttp2_hd_deflater* plain = nullptr;
  REQUIRE(nghttp2_hd_deflate_new(&seeded, 4096) == 0);
  REQUIRE(nghttp2_hd_deflate_new(&plain, 4096) == 0);
  const auto first = response("999");
  CHECK(first.never_indexed(1));
  CHECK(first.nva("200", true)[2].flags == NGHTTP2_NV_FLAG_NONE);  // seeding: indexed
  encoded_size(seeded, first.nva("200", true));
  encoded_size(plain, first.nva("200"));
  const std::size_t seeded_entries = nghttp2_hd_deflate_get_num_table_entries(seeded);
  const std::size_t plain_entries = nghttp2_hd_deflate_get_num_table_entries(plain);
  CHECK(seeded_entries == plain_entries + 2);  // the two changing fields, once
  for (int i = 0; i < 10; ++i) {
    const auto next = response(std::to_string(998 - i));
    const std::size_t with_names = encoded_size(seeded, next.nva("200"));
    const std::size_t without = encoded_size(plain, next.nva("200"));
    INFO("block " << i << ": " << with_names << " bytes against " << without);
    // Two names as an index (a byte or two each) instead of literal: 21 and 9
    // characters, a Huffman-coded 15 and 7 bytes.
    CHECK(with_names + 15 < without);
  }
  // Never indexed all along: no entry was added after the seed.
  CHECK(nghttp2_hd_deflate_get_num_table_entries(seeded) == seeded_entries);
  CHECK(nghttp2_hd_deflate_get_num_table_entries(plain) == plain_entries);
  nghttp2_hd_deflate_del(seeded);
  nghttp2_hd_deflate_del(plain);
}
