// Fields found by a pass over a head: known names by their enum, others as
// text without case, every line counted, the first line's value.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <boost/beast/http/fields.hpp>

#include "upstream/field_scan.hpp"

using namespace sluice;
namespace http = boost::beast::http;

TEST_CASE("field scan: counts, first values and every line, known and unknown names",
          "[field_scan]") {
  sluice::HttpFields f;
  f.insert("host", "a.example");  // a known name in any case is tagged with its enum
  f.insert("X-Forwarded-For", "203.0.113.1");
  f.insert(http::field::transfer_encoding, "gzip");
  f.insert("x-forwarded-for", "10.0.0.1");
  f.insert("X-Forwarded-Forx", "not this one");
  f.insert(http::field::transfer_encoding, "chunked");

  CHECK(count_field(f, http::field::host) == 1);
  CHECK(field_value(f, http::field::host) == "a.example");
  CHECK(count_field(f, http::field::transfer_encoding) == 2);
  CHECK(field_value(f, http::field::transfer_encoding) == "gzip");
  CHECK(count_field(f, http::field::content_length) == 0);
  CHECK(field_value(f, http::field::content_length).empty());

  const FieldName xff("x-FORWARDED-for");
  CHECK(count_field(f, xff) == 2);
  CHECK(field_value(f, xff) == "203.0.113.1");
  std::vector<std::string> lines;
  for_each_field(f, xff, [&](std::string_view v) { lines.emplace_back(v); });
  CHECK(lines == std::vector<std::string>{"203.0.113.1", "10.0.0.1"});

  // A name given as text that Beast knows is compared by its enum.
  const FieldName te("Transfer-Encoding");
  CHECK(te.id == http::field::transfer_encoding);
  CHECK(count_field(f, te) == 2);
  // As Beast's own lookups would answer.
  CHECK(count_field(f, xff) == f.count("X-Forwarded-For"));
  CHECK(field_value(f, http::field::transfer_encoding) == f[http::field::transfer_encoding]);
}
