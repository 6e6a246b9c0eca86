#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/spares.hpp"

namespace sluice {

namespace {
// Types of their own, so that no other test's spares are counted here.
struct Tag {
  int value = 0;
};
using Tags = std::vector<Tag>;
}  // namespace

TEST_CASE("spares: a container given back is taken again with its memory, emptied",
          "[common][spares]") {
  if (!Spares<Tags>::kKeeps) return;  // AddressSanitizer: nothing is kept
  Tags tags;
  tags.resize(10);
  const Tag* where = tags.data();
  keep_spare(std::move(tags));
  CHECK(Spares<Tags>::kept() == 1);
  Tags again = Spares<Tags>::take();
  CHECK(again.empty());
  CHECK(again.data() == where);
  CHECK(again.capacity() >= 10);
  CHECK(Spares<Tags>::kept() == 0);
  CHECK(Spares<Tags>::take().capacity() == 0);  // none kept: a new one
}

TEST_CASE("spares: what holds no heap memory, or too much, is not kept", "[common][spares]") {
  const std::size_t before = Spares<std::string>::kept();
  keep_spare(std::string("short"));  // in the string's own buffer
  keep_spare(Tags{});
  CHECK(Spares<std::string>::kept() == before);
  CHECK(Spares<Tags>::kept() == 0);
  Tags huge(100'000);  // over the 64 KiB a kept list may hold
  keep_spare(std::move(huge));
  CHECK(Spares<Tags>::kept() == 0);
  keep_spare(std::string(2000, 'x'));  // over the 1 KiB a kept string may hold
  CHECK(Spares<std::string>::kept() == before);
}

TEST_CASE("spares: a thread keeps at most its bound, and its own", "[common][spares]") {
  if (!Spares<Tags>::kKeeps) return;
  for (int i = 0; i < 600; ++i) keep_spare(Tags(4));
  CHECK(Spares<Tags>::kept() == 512);
  std::size_t other = 1;
  std::thread([&] { other = Spares<Tags>::kept(); }).join();
  CHECK(other == 0);
  while (Spares<Tags>::kept() > 0) (void)Spares<Tags>::take();
}

TEST_CASE("spares: long lists are kept up to the bytes bound of their type", "[common][spares]") {
  if (!Spares<Tags>::kKeeps) return;
  // A batch's list: 15,000 elements of 4 bytes, 60 KiB, is kept...
  Tags batch(15'000);
  const Tag* where = batch.data();
  keep_spare(std::move(batch));
  CHECK(Spares<Tags>::kept() == 1);
  CHECK(Spares<Tags>::take().data() == where);
  // ...but no more of them than 256 KiB holds.
  for (int i = 0; i < 10; ++i) keep_spare(Tags(15'000));
  CHECK(Spares<Tags>::kept() == 4);
  while (Spares<Tags>::kept() > 0) (void)Spares<Tags>::take();
  // What was taken is no longer counted: as many fit again.
  for (int i = 0; i < 10; ++i) keep_spare(Tags(15'000));
  CHECK(Spares<Tags>::kept() == 4);
  while (Spares<Tags>::kept() > 0) (void)Spares<Tags>::take();
}

TEST_CASE("spares: a list of strings gives its strings back one by one", "[common][spares]") {
  if (!Spares<std::string>::kKeeps) return;
  while (Spares<std::string>::kept() > 0) (void)Spares<std::string>::take();
  std::vector<std::string> list;
  list.emplace_back(100, 'a');
  list.emplace_back("b");  // nothing on the heap: dropped
  list.emplace_back(200, 'c');
  const char* first = list[0].data();
  keep_spare(std::move(list));
  CHECK(Spares<std::string>::kept() == 2);
  std::string taken = Spares<std::string>::take();  // the last one given back
  CHECK(taken.empty());
  CHECK(taken.capacity() >= 200);
  CHECK(Spares<std::string>::take().data() == first);
  CHECK(Spares<std::vector<std::string>>::take().capacity() >= 3);
}

}  // namespace sluice
