#include <catch2/catch.hpp>

#include <string>

#include "upstream/redis/cluster/slot.hpp"

using sluice::redis::cluster::crc16;
using sluice::redis::cluster::hash_part;
using sluice::redis::cluster::key_slot;

TEST_CASE("cluster slot: CRC16-XMODEM check value") {
  CHECK(crc16("123456789") == 0x31C3);
  CHECK(crc16("") == 0);
}

// Every expected slot below is what `CLUSTER KEYSLOT <key>` answered on a
// cluster-enabled redis-server 7.0.
TEST_CASE("cluster slot: the slots a real server gives") {
  struct Case {
    const char* key;
    unsigned slot;
  };
  const Case cases[] = {
      {"", 0},
      {"123456789", 12739},
      {"foo", 12182},
      {"bar", 5061},
      {"hello", 866},
      {"{user1000}.following", 3443},
      {"{user1000}.followers", 3443},
      {"foo{}{bar}", 8363},
      {"foo{{bar}}zap", 4015},
      {"foo{bar}{zap}", 5061},
      {"{}", 15257},
      {"{", 4092},
      {"}", 12090},
      {"a{b", 13340},
      {"{a}b", 15495},
      {"x{y}", 12222},
      {"{y}", 12222},
      {"y", 12222},
      {"sluice:per_ip:{ba7816bf8f01cfea414140de5dae2223}", 11353},
      {"sluice:per_ip:ba7816bf8f01cfea414140de5dae2223", 14942},
  };
  for (const auto& c : cases) {
    INFO("key: " << c.key);
    CHECK(key_slot(c.key) == c.slot);
  }
}

TEST_CASE("cluster slot: the hash part is the first non-empty tag, else the key") {
  CHECK(hash_part("plain") == "plain");
  CHECK(hash_part("{tag}rest") == "tag");
  CHECK(hash_part("a{tag}b{other}") == "tag");
  CHECK(hash_part("a{}b{other}") == "a{}b{other}");  // the first tag is empty: whole key
  CHECK(hash_part("a{{b}}") == "{b");                 // up to the first '}' after the '{'
  CHECK(hash_part("a{b") == "a{b");                   // no closing brace
  CHECK(hash_part("a}b{") == "a}b{");
}

TEST_CASE("cluster slot: binary keys and the slot range") {
  const std::string binary("\x00\xff{\x01}\x80", 6);
  CHECK(hash_part(binary) == std::string("\x01", 1));
  CHECK(key_slot(binary) == key_slot(std::string("\x01", 1)));
  for (int i = 0; i < 2000; ++i) CHECK(key_slot(std::to_string(i)) < 16384);
}
