// The session-ticket keys: which key seals, which still open, when one goes.
#include <catch2/catch.hpp>

#include <chrono>

#include "gateway/tls/ticket_keys.hpp"

using sluice::TicketKeys;
using namespace std::chrono_literals;

namespace {

std::span<const unsigned char, TicketKeys::kNameBytes> name_of(const TicketKeys::Key& key) {
  return std::span<const unsigned char, TicketKeys::kNameBytes>(key.name);
}

}  // namespace

TEST_CASE("ticket keys: one seals for its rotation, then the next; old ones open until their "
          "tickets time out",
          "[tls]") {
  TicketKeys keys(1h, 2h);
  const auto t0 = TicketKeys::Clock::time_point() + 1000h;
  const auto first = keys.sealing(t0);
  REQUIRE(first);
  CHECK(keys.size() == 1);
  // The same key seals until an hour has passed.
  const auto same = keys.sealing(t0 + 59min);
  REQUIRE(same);
  CHECK(same->name == first->name);
  CHECK(same->aes == first->aes);
  auto opened = keys.opening(name_of(*first), t0 + 59min);
  REQUIRE(opened);
  CHECK(opened->newest);
  CHECK(opened->key.hmac == first->hmac);

  // Then a new key, with new secrets, and the first only opens (its tickets are renewed).
  const auto second = keys.sealing(t0 + 1h);
  REQUIRE(second);
  CHECK(second->name != first->name);
  CHECK(second->hmac != first->hmac);
  CHECK(second->aes != first->aes);
  CHECK(keys.size() == 2);
  opened = keys.opening(name_of(*first), t0 + 1h + 1s);
  REQUIRE(opened);
  CHECK_FALSE(opened->newest);
  CHECK(opened->key.aes == first->aes);
  opened = keys.opening(name_of(*second), t0 + 1h + 1s);
  REQUIRE(opened);
  CHECK(opened->newest);

  // A ticket the first key sealed last, just before it retired, lives 2 h
  // (and OpenSSL's whole seconds): the first key opens it until then, and
  // nothing after.
  const auto grace = TicketKeys::kGrace;
  CHECK(keys.opening(name_of(*first), t0 + 3h + grace - 1ms));
  CHECK_FALSE(keys.opening(name_of(*first), t0 + 3h + grace));
  CHECK(keys.size() == 1);
  // The second key still seals after its rotation only if nothing asked for
  // a ticket since: it retires when the next ticket is sealed.
  CHECK(keys.opening(name_of(*second), t0 + 3h));
  const auto third = keys.sealing(t0 + 3h);
  REQUIRE(third);
  CHECK(third->name != second->name);

  // A name no key has opens nothing.
  TicketKeys::Key stranger;
  stranger.name.fill(0x5a);
  CHECK_FALSE(keys.opening(name_of(stranger), t0 + 3h));
}

TEST_CASE("ticket keys: a reload's periods apply from then on", "[tls]") {
  TicketKeys keys(1h, 2h);
  const auto t0 = TicketKeys::Clock::time_point() + 1000h;
  const auto first = keys.sealing(t0);
  REQUIRE(first);
  keys.set_periods(10min, 30min);
  const auto second = keys.sealing(t0 + 10min);
  REQUIRE(second);
  CHECK(second->name != first->name);
  CHECK(keys.opening(name_of(*first), t0 + 39min));
  CHECK_FALSE(keys.opening(name_of(*first), t0 + 40min + TicketKeys::kGrace));
}
