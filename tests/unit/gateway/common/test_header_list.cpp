// HeaderList: fields in order, and strings kept across clear() for the next fields.
#include <catch2/catch.hpp>
#include <string>

#include "common/header_list.hpp"

using sluice::HeaderList;
using sluice::HeaderSpares;

TEST_CASE("header list: fields in order, cleared and filled again", "[header_list]") {
  HeaderList list;
  list.emplace_back("X-RateLimit-Remaining", "1234567890123456789");
  list.add("RateLimit") = "\"per_key\";r=49;t=0";
  REQUIRE(list.size() == 2);
  CHECK(list[0] == HeaderList::value_type{"X-RateLimit-Remaining", "1234567890123456789"});
  CHECK(list.back().second == "\"per_key\";r=49;t=0");
  const char* kept = list[0].second.data();

  list.clear();
  CHECK(list.empty());
  CHECK(list.begin() == list.end());
  // The same slot, refilled with a shorter value: its storage is reused.
  list.emplace_back("X-RateLimit-Remaining", "7");
  CHECK(list.size() == 1);
  CHECK(list[0].second == "7");
  CHECK(list[0].second.data() == kept);
  // add() hands out the slot's string empty.
  list.clear();
  CHECK(list.add("A").empty());
}

TEST_CASE("header list: copies, moves, swaps and compares the fields only", "[header_list]") {
  HeaderList list{{"A", "1"}, {"B", "2"}, {"C", "3"}};
  list.clear();
  list.emplace_back("D", "4");
  const HeaderList copy = list;
  CHECK(copy.size() == 1);
  CHECK(copy == HeaderList{{"D", "4"}});
  CHECK_FALSE(copy == HeaderList{{"D", "4"}, {"B", "2"}});

  HeaderList other{{"E", "5"}, {"F", "6"}};
  list.swap(other);
  CHECK(list == HeaderList{{"E", "5"}, {"F", "6"}});
  CHECK(other == HeaderList{{"D", "4"}});

  HeaderList moved = std::move(list);
  CHECK(moved.size() == 2);
  CHECK(list.empty());  // NOLINT(bugprone-use-after-move): a moved-from list is empty
  HeaderList assigned;
  assigned = other;
  CHECK(assigned == other);

  // Onto itself: a move changes nothing, and a field of the list copied in
  // while the list grows stays whole.
  HeaderList& same = assigned;
  assigned = std::move(same);
  CHECK(assigned == HeaderList{{"D", "4"}});
  for (int i = 0; i < 20; ++i) assigned.push_back(assigned[0]);
  CHECK(assigned.size() == 21);
  CHECK(assigned.back() == HeaderList::value_type{"D", "4"});
}

TEST_CASE("header list: a list that goes leaves its grown strings to the next", "[header_list]") {
  if (!HeaderSpares::kKeeps) return;  // nothing is kept under AddressSanitizer
  const std::string long_value(100, 'v');
  const char* kept_value = nullptr;
  {
    HeaderList first;
    first.emplace_back("X-RateLimit-Remaining", long_value);
    kept_value = first[0].second.data();
  }
  HeaderList next;
  std::string& value = next.add("X-RateLimit-Remaining");
  CHECK(value.empty());
  CHECK(value.capacity() >= long_value.size());
  CHECK(value.data() == kept_value);  // the same string, not a new one
  value = "7";
  CHECK(next == HeaderList{{"X-RateLimit-Remaining", "7"}});
  // A list holding a string too long to keep leaves nothing.
  const std::size_t before = HeaderSpares::kept();
  {
    HeaderList big;
    big.emplace_back("X-Big", std::string(4096, 'b'));
  }
  CHECK(HeaderSpares::kept() <= before);
  HeaderList after;
  CHECK(after.add("X-Big").capacity() < 4096);
  // Nor does a list of more fields than a request's own headers come to.
  while (HeaderSpares::kept() > 0) (void)HeaderSpares::take();
  {
    HeaderList many;
    for (int i = 0; i < 40; ++i) many.emplace_back("X-Many", "1");
  }
  CHECK(HeaderSpares::kept() == 0);
  {
    HeaderList few;
    for (int i = 0; i < 10; ++i) few.emplace_back("X-Few", "1");
  }
  CHECK(HeaderSpares::kept() == 1);
}
