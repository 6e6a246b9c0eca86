// Unit tests of what the Sentinel client reads from sentinels: the answer to
// GET-MASTER-ADDR-BY-NAME, pub/sub messages and +switch-master payloads.
#include <catch2/catch.hpp>

#include "support/script_replies.hpp"

#include "upstream/redis/push_link.hpp"
#include "upstream/redis/sentinel/sentinel_protocol.hpp"

namespace {

using sluice::redis::Endpoint;
using sluice::redis::Reply;
using sluice::test::array_reply;
using sluice::test::text_reply;
namespace sentinel = sluice::redis::sentinel;

}  // namespace

TEST_CASE("sentinel: a +switch-master payload names the master and both addresses",
          "[sentinel][unit]") {
  const auto event = sentinel::parse_switch_master("mymaster 127.0.0.1 7001 127.0.0.1 7002");
  REQUIRE(event);
  CHECK(event->master == "mymaster");
  CHECK(event->from == Endpoint{"127.0.0.1", 7001});
  CHECK(event->to == Endpoint{"127.0.0.1", 7002});

  const auto v6 = sentinel::parse_switch_master("cache ::1 6379 fe80::2 6380");
  REQUIRE(v6);
  CHECK(v6->to == Endpoint{"fe80::2", 6380});

  CHECK_FALSE(sentinel::parse_switch_master(""));
  CHECK_FALSE(sentinel::parse_switch_master("mymaster 127.0.0.1 7001 127.0.0.1"));
  CHECK_FALSE(sentinel::parse_switch_master("mymaster 127.0.0.1 7001 127.0.0.1 7002 extra"));
  CHECK_FALSE(sentinel::parse_switch_master("mymaster 127.0.0.1 7001 127.0.0.1 x7002"));
  CHECK_FALSE(sentinel::parse_switch_master("mymaster 127.0.0.1 7001 127.0.0.1 70000"));
  CHECK_FALSE(sentinel::parse_switch_master("mymaster  127.0.0.1 7001 127.0.0.1 7002"));
}

TEST_CASE("sentinel: ports are decimal 1..65535", "[sentinel][unit]") {
  CHECK(sentinel::parse_port("6379") == std::uint16_t{6379});
  CHECK(sentinel::parse_port("65535") == std::uint16_t{65535});
  CHECK_FALSE(sentinel::parse_port("0"));
  CHECK_FALSE(sentinel::parse_port("65536"));
  CHECK_FALSE(sentinel::parse_port(""));
  CHECK_FALSE(sentinel::parse_port("-1"));
  CHECK_FALSE(sentinel::parse_port("63 79"));
}

TEST_CASE("sentinel: GET-MASTER-ADDR-BY-NAME answers", "[sentinel][unit]") {
  Endpoint address;
  using sentinel::MasterAnswer;
  CHECK(sentinel::parse_master_address(array_reply({text_reply("10.0.0.5"), text_reply("6380")}),
                                       address) == MasterAnswer::kAddress);
  CHECK(address == Endpoint{"10.0.0.5", 6380});

  // An unknown master name is a nil reply.
  CHECK(sentinel::parse_master_address(Reply{}, address) == MasterAnswer::kUnknownMaster);

  CHECK(sentinel::parse_master_address(array_reply({text_reply("10.0.0.5")}), address) ==
        MasterAnswer::kMalformed);
  CHECK(sentinel::parse_master_address(array_reply({text_reply(""), text_reply("6380")}),
                                       address) == MasterAnswer::kMalformed);
  CHECK(sentinel::parse_master_address(array_reply({text_reply("10.0.0.5"), text_reply("port")}),
                                       address) == MasterAnswer::kMalformed);
  CHECK(sentinel::parse_master_address(text_reply("10.0.0.5:6380"), address) ==
        MasterAnswer::kMalformed);
  CHECK(address == Endpoint{"10.0.0.5", 6380});  // left as it was
}

TEST_CASE("sentinel: pub/sub messages on one channel", "[sentinel][unit]") {
  const auto message =
      array_reply({text_reply("message"), text_reply("+switch-master"), text_reply("m a 1 b 2")});
  const auto payload = sluice::redis::pubsub_payload(message, sentinel::kSwitchMasterChannel);
  REQUIRE(payload);
  CHECK(*payload == "m a 1 b 2");

  Reply confirmation =
      array_reply({text_reply("subscribe"), text_reply("+switch-master"), Reply{}});
  confirmation.elements[2].type = Reply::Type::kInteger;
  confirmation.elements[2].integer = 1;
  CHECK_FALSE(sluice::redis::pubsub_payload(confirmation, sentinel::kSwitchMasterChannel));
  CHECK_FALSE(sluice::redis::pubsub_payload(
      array_reply({text_reply("message"), text_reply("+sdown"), text_reply("x")}),
      sentinel::kSwitchMasterChannel));
  CHECK_FALSE(sluice::redis::pubsub_payload(text_reply("message"), sentinel::kSwitchMasterChannel));
}
