// Query parameters as rate-limit keys read them: form-decoded names and values.
#include <catch2/catch.hpp>

#include <string>

#include "common/query_params.hpp"

TEST_CASE("query parameters: form-decoded, first occurrence wins", "[ratelimit][keys]") {
  using sluice::query_param;
  CHECK(query_param("a=1&b=2", "b") == std::optional<std::string>("2"));
  CHECK(query_param("b=first&b=second", "b") == std::optional<std::string>("first"));
  CHECK(query_param("key=a%20b%2Fc", "key") == std::optional<std::string>("a b/c"));
  CHECK(query_param("k%65y=v", "key") == std::optional<std::string>("v"));
  CHECK(query_param("key=100%", "key") == std::optional<std::string>("100%"));
  CHECK(query_param("key=%zz%4", "key") == std::optional<std::string>("%zz%4"));
  CHECK(query_param("key=a+b", "key") == std::optional<std::string>("a b"));
  CHECK(query_param("key=a%2Bb", "key") == std::optional<std::string>("a+b"));
  CHECK(query_param("key=a%2bb+%2B", "key") == std::optional<std::string>("a+b +"));
  CHECK(query_param("my+key=1", "my key") == std::optional<std::string>("1"));
  CHECK(query_param("my%20key=1", "my key") == std::optional<std::string>("1"));
  CHECK(query_param("my+key=1", "my+key") == std::nullopt);
  CHECK(query_param("my%2Bkey=1", "my+key") == std::optional<std::string>("1"));
  CHECK(query_param("key", "key") == std::optional<std::string>(""));
  CHECK(query_param("key=", "key") == std::optional<std::string>(""));
  CHECK(query_param("&&key=x&", "key") == std::optional<std::string>("x"));
  CHECK(query_param("keys=1&akey=2&ke=3&k%65=4", "key") == std::nullopt);
  CHECK(query_param("", "key") == std::nullopt);
  CHECK(query_param("key%=1&key=2", "key") == std::optional<std::string>("2"));
  CHECK(sluice::percent_decode("%41%42%43") == "ABC");
  CHECK(sluice::percent_decode("a+b%2") == "a+b%2");
  CHECK(sluice::form_decode("a+b%2") == "a b%2");
  CHECK(sluice::form_decode("%2B+%25%") == "+ %%");
}

TEST_CASE("query parameters: occurrences counted by decoded name", "[ratelimit][keys]") {
  using sluice::query_param_count;
  CHECK(query_param_count("", "user") == 0);
  CHECK(query_param_count("users=1&auser=2", "user") == 0);
  CHECK(query_param_count("user=a", "user") == 1);
  CHECK(query_param_count("user=a&x=1&x=2", "user") == 1);
  CHECK(query_param_count("user=a&user=b", "user") == 2);
  CHECK(query_param_count("user=a&us%65r=b", "user") == 2);
  CHECK(query_param_count("user&user=", "user") == 2);
  CHECK(query_param_count("user=a&&user=a&%75ser", "user") == 3);
  CHECK(query_param_count("my+id=1&my%20id=2", "my id") == 2);
}
