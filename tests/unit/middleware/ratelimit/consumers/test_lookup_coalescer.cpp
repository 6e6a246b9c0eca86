#include <catch2/catch.hpp>
#include <boost/asio/io_context.hpp>

#include "middleware/ratelimit/consumers/lookup_coalescer.hpp"

namespace sluice {

TEST_CASE("lookup coalescer: a shed lookup leaves its delivery with the caller",
          "[consumers][coalescer]") {
  boost::asio::io_context io;
  LookupCoalescer coalescer(1);
  int delivered = 0;
  LookupCoalescer::Deliver first = [&](const ConsumerLookup&) { ++delivered; };
  CHECK(coalescer.join("k1", "f1", io.get_executor(), std::move(first)) ==
        LookupCoalescer::Join::kLead);
  // The same fingerprint waits on the lookup under way; another is shed, its
  // delivery untouched, for the caller to answer with.
  LookupCoalescer::Deliver same = [&](const ConsumerLookup&) { ++delivered; };
  CHECK(coalescer.join("k1", "f1", io.get_executor(), std::move(same)) ==
        LookupCoalescer::Join::kWait);
  LookupCoalescer::Deliver other = [&](const ConsumerLookup&) { delivered += 10; };
  REQUIRE(coalescer.join("k2", "f2", io.get_executor(), std::move(other)) ==
          LookupCoalescer::Join::kShed);
  REQUIRE(other);
  other(ConsumerLookup{});
  CHECK(delivered == 10);
  coalescer.finish("f1", ConsumerLookup{});
  io.run();
  CHECK(delivered == 12);
}

}  // namespace sluice
