// Exemptions: client CIDRs and API-key plans that skip rate limiting.
#include <catch2/catch.hpp>

#include "middleware/ratelimit/exemptions.hpp"
#include "support/request_view_fixture.hpp"

namespace {

using sluice::Exemption;
using sluice::ExemptionsConfig;
using sluice::testing::ipv4;
using sluice::testing::Request;
using sluice::testing::with_consumers;

ExemptionsConfig exemptions() {
  ExemptionsConfig e;
  e.client_cidrs = {*sluice::parse_cidr("10.0.0.0/8"), *sluice::parse_cidr("2001:db8::/32")};
  e.plans = {"pro"};
  return e;
}

// The exemption of `request`, identified under `api_keys`.
Exemption exempt(const ExemptionsConfig& e, const sluice::RequestView& request,
                 const sluice::ApiKeysConfig& api_keys) {
  return sluice::find_exemption(e, request, sluice::identify(request, api_keys));
}

}  // namespace

TEST_CASE("exemptions: client addresses inside a CIDR", "[ratelimit][exemptions]") {
  const auto api_keys = with_consumers();
  Request request;
  request.ip = ipv4(10, 1, 2, 3);
  CHECK(exempt(exemptions(), request.view(), api_keys) == Exemption::kCidr);
  request.ip = *sluice::parse_ip("2001:db8:1::5");
  CHECK(exempt(exemptions(), request.view(), api_keys) == Exemption::kCidr);
  request.ip = *sluice::parse_ip("::ffff:10.9.9.9");  // mapped IPv4 is IPv4
  CHECK(exempt(exemptions(), request.view(), api_keys) == Exemption::kCidr);
  request.ip = ipv4(11, 0, 0, 1);
  CHECK(exempt(exemptions(), request.view(), api_keys) == Exemption::kNone);
  request.ip = *sluice::parse_ip("2001:db9::1");
  CHECK(exempt(exemptions(), request.view(), api_keys) == Exemption::kNone);
  CHECK(exempt(ExemptionsConfig{}, request.view(), api_keys) == Exemption::kNone);
}

TEST_CASE("exemptions: the plan of the request's API key", "[ratelimit][exemptions]") {
  const auto api_keys = with_consumers();
  Request request;  // 1.2.3.4: outside every CIDR
  SECTION("a consumer of an exempt plan") {
    request.header("X-API-Key", "demo-pro-key");
    CHECK(exempt(exemptions(), request.view(), api_keys) == Exemption::kPlan);
    CHECK(sluice::exemption_reason(Exemption::kPlan) == "plan");
    CHECK(sluice::exemption_reason(Exemption::kCidr) == "cidr");
  }
  SECTION("a consumer of another plan") {
    request.header("X-API-Key", "other-key");
    CHECK(exempt(exemptions(), request.view(), api_keys) == Exemption::kNone);
  }
  SECTION("an unlisted key counts as missing, even when the default plan is exempt") {
    auto e = exemptions();
    e.plans.push_back(api_keys.default_plan);
    request.header("X-API-Key", "made-up");
    CHECK(exempt(e, request.view(), api_keys) == Exemption::kNone);
    CHECK(exempt(e, Request{}.view(), api_keys) == Exemption::kNone);
  }
  SECTION("with no consumers no key is exempt by plan (any key would have the default plan)") {
    auto e = exemptions();
    e.plans = {"free"};
    request.header("X-API-Key", "anything");
    CHECK(exempt(e, request.view(), sluice::ApiKeysConfig{}) == Exemption::kNone);
  }
  SECTION("a repeated key header never exempts") {
    request.repeat("X-API-Key", "demo-pro-key", 2);
    CHECK(exempt(exemptions(), request.view(), api_keys) == Exemption::kNone);
  }
}
