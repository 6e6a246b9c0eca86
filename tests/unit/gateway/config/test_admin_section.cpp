// The admin section's token file: read at load, trailing newline dropped,
// an empty or unreadable file, or one with spaces or control characters, refused.
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

}  // namespace sluice
