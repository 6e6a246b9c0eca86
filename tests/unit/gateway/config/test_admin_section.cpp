// The admin section's token file: read at load, trailing newline dropped,
// an empty or unreadable file, or one with spaces or control characters,
// refused. admin.hosts: host names only.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "gateway/config/load.hpp"
#include "support/config_text.hpp"
#include "support/redis_server_fixture.hpp"

namespace sluice {

TEST_CASE("admin token: read from its file, trailing line breaks dropped", "[config][admin]") {
  test::TempDir dir;
  const std::string file = dir.file("token");
  std::ofstream(file) << "s3cret-admin-token\r\n\n";
  const auto c = testing::parse_ok("admin:\n  token_file: " + file + "\n" + testing::kMinimalTail);
  CHECK(c->admin.token == "s3cret-admin-token");
  CHECK(c->admin.token_file == file);
  const auto none =
      testing::parse_ok(std::string("admin:\n  listen: 127.0.0.1:9901\n") + testing::kMinimalTail);
  CHECK(none->admin.token.empty());
  CHECK(none->admin.token_file.empty());
}

TEST_CASE("admin token: an empty file or a file of line breaks is refused", "[config][admin]") {
  test::TempDir dir;
  const std::string file = dir.file("token");
  std::ofstream(file) << "\n";
  CHECK(testing::parse("admin:\n  token_file: " + file + "\n" + testing::kMinimalTail).errors ==
        std::vector<std::string>{"test.yaml:2: admin.token_file: \"" + file +
                                 "\" is empty; an admin token must not be empty"});
}

TEST_CASE("admin token: a token no Bearer credential can carry is refused", "[config][admin]") {
  test::TempDir dir;
  const std::string file = dir.file("token");
  for (const std::string token : {"two words", "trailing-space ", "tab\there", "line\nbreak"}) {
    std::ofstream(file, std::ios::trunc) << token;
    CHECK(testing::parse("admin:\n  token_file: " + file + "\n" + testing::kMinimalTail).errors ==
          std::vector<std::string>{"test.yaml:2: admin.token_file: \"" + file +
                                   "\" holds a space, a control or a non-ASCII character; an "
                                   "admin token is one line of visible ASCII"});
  }
}

TEST_CASE("admin hosts: DNS names, nothing else", "[config][admin]") {
  const auto c = testing::parse_ok(std::string("admin:\n  hosts: [gw-1.internal, admin]\n") +
                                   testing::kMinimalTail);
  CHECK(c->admin.hosts == std::vector<std::string>{"gw-1.internal", "admin"});
  CHECK(testing::parse_ok(testing::kMinimalTail)->admin.hosts.empty());
  for (const std::string bad : {"\"gw-1:9901\"", "\"http://gw-1\"", "10.0.0.5", "\"::1\"",
                                "\"a b\""}) {
    const auto errors =
        testing::parse("admin:\n  hosts: [" + bad + "]\n" + testing::kMinimalTail).errors;
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].starts_with("test.yaml:2: admin.hosts[0]: expected a host name such as "
                                "admin.example.internal (no port, no scheme, not an address)"));
  }
}

}  // namespace sluice
