// The API key and plan of a request: configured header, Bearer credentials, consumers.
#include <catch2/catch.hpp>

#include <optional>
#include <string>

#include "middleware/ratelimit/api_key.hpp"
#include "support/request_view_fixture.hpp"

namespace {

using sluice::ApiKeysConfig;
using sluice::RequestView;
using sluice::testing::Request;
using sluice::testing::with_consumers;

}  // namespace

TEST_CASE("api key from the configured header", "[ratelimit][keys]") {
  ApiKeysConfig config;  // X-API-Key, no consumers, default plan "free"
  Request request;
  CHECK_FALSE(sluice::extract_api_key(request.view(), config).key);
  CHECK(sluice::extract_api_key(request.view(), config).plan == "free");

  request.header("x-api-key", "  abc123 ");
  auto key = sluice::extract_api_key(request.view(), config);
  REQUIRE(key.key);
  CHECK(*key.key == "abc123");
  CHECK(key.plan == "free");

  request.header("X-API-Key", "");
  CHECK_FALSE(sluice::extract_api_key(request.view(), config).key);

  SECTION("keys longer than 256 bytes count as missing") {
    request.header("X-API-Key", std::string(256, 'k'));
    CHECK(sluice::extract_api_key(request.view(), config).key);
    request.header("X-API-Key", std::string(257, 'k'));
    CHECK_FALSE(sluice::extract_api_key(request.view(), config).key);
  }
  SECTION("a request without a header lookup has no key") {
    RequestView view = request.view();
    view.header = nullptr;
    CHECK_FALSE(sluice::extract_api_key(view, config).key);
  }
}

TEST_CASE("api key from Authorization: Bearer", "[ratelimit][keys]") {
  ApiKeysConfig config;
  config.header = "Authorization";
  Request request;
  auto key_of = [&](std::string value) {
    request.header("Authorization", std::move(value));
    auto key = sluice::extract_api_key(request.view(), config).key;
    return key ? std::optional<std::string>(std::string(*key)) : std::nullopt;
  };
  CHECK(key_of("Bearer tok-1") == std::optional<std::string>("tok-1"));
  CHECK(key_of("bearer tok-2") == std::optional<std::string>("tok-2"));
  CHECK(key_of("BEARER   tok-3  ") == std::optional<std::string>("tok-3"));
  CHECK(key_of("Basic dXNlcjpwYXNz") == std::nullopt);
  CHECK(key_of("Bearer") == std::nullopt);
  CHECK(key_of("Bearer ") == std::nullopt);
  CHECK(key_of("Bearertok") == std::nullopt);
  CHECK(key_of("tok-4") == std::nullopt);
  CHECK(key_of("\tBearer  AZaz09-._~+/== \t") == std::optional<std::string>("AZaz09-._~+/=="));
  config.header = "authorization";  // the header name is matched case-insensitively
  CHECK(key_of("Bearer tok-5") == std::optional<std::string>("tok-5"));
}

TEST_CASE("Authorization: Bearer values not of the form Bearer <token68> are malformed",
          "[ratelimit][keys]") {
  ApiKeysConfig config;
  config.header = "Authorization";
  Request request;
  auto parse = [&](std::string value) {
    request.header("Authorization", std::move(value));
    return sluice::extract_api_key(request.view(), config);
  };
  for (const char* value :
       {"Bearer", "Bearer ", "bearer   ", "Bearer tok,", "Bearer tok extra", "Bearer tok ,",
        "Bearer\ttok", "Bearer \ttok", "Bearer to=k", "Bearer =", "Bearer tok=a", "Bearer t\"k\"",
        "Bearer tok;x", "Bearer t%6Fk", "Bearer t\xc3\xa9"}) {
    auto key = parse(value);
    INFO(value);
    CHECK(key.malformed);
    CHECK_FALSE(key.key);
    CHECK(key.plan == "free");
  }
  // Another scheme, or none, is a missing key, not a malformed one.
  for (const char* value : {"Basic dXNlcjpwYXNz", "Bearertok", "tok", "", "  ", "Token a b,"}) {
    auto key = parse(value);
    INFO(value);
    CHECK_FALSE(key.malformed);
    CHECK_FALSE(key.key);
  }
  // Equivalent spellings give the same key.
  for (const char* value : {"Bearer tok==", "bearer tok==", "BEARER    tok==", " Bearer tok==\t"}) {
    auto key = parse(value);
    INFO(value);
    CHECK_FALSE(key.malformed);
    CHECK(key.key == std::optional<std::string_view>("tok=="));
  }
  SECTION("a token longer than 256 bytes is missing, not malformed") {
    auto key = parse("Bearer " + std::string(257, 'k'));
    CHECK_FALSE(key.malformed);
    CHECK_FALSE(key.key);
    CHECK(parse("Bearer " + std::string(256, 'k')).key);
  }
  SECTION("other headers are never malformed") {
    config.header = "X-API-Key";
    request.header("X-API-Key", "Bearer tok,");
    auto key = sluice::extract_api_key(request.view(), config);
    CHECK_FALSE(key.malformed);
    CHECK(key.key == std::optional<std::string_view>("Bearer tok,"));
  }
}

TEST_CASE("consumers: plans, and unlisted keys count as missing", "[ratelimit][keys]") {
  ApiKeysConfig config = with_consumers();
  Request request;
  request.header("X-API-Key", "demo-pro-key");
  auto key = sluice::extract_api_key(request.view(), config);
  REQUIRE(key.key);
  CHECK(key.plan == "pro");

  request.header("X-API-Key", "random-key");
  key = sluice::extract_api_key(request.view(), config);
  CHECK_FALSE(key.key);
  CHECK(key.plan == "free");

  SECTION("consumers without the lookup map") {
    config.consumer_index.clear();
    request.header("X-API-Key", "other-key");
    key = sluice::extract_api_key(request.view(), config);
    REQUIRE(key.key);
    CHECK(key.plan == "gold");
  }
}
