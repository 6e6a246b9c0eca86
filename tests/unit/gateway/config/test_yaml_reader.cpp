// The generic YAML reader: typed scalars, key checks, error placement and order.
#include <catch2/catch.hpp>

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "gateway/config/yaml_reader.hpp"

namespace sluice::config {
namespace {

constexpr std::array<std::string_view, 2> kKeys = {"size", "name"};

EnvLookup no_environment() {
  return [](std::string_view) -> std::optional<std::string> { return std::nullopt; };
}

// Reads `text` and hands its root mapping to `read`; returns the errors.
template <class Read>
std::vector<std::string> read(std::string_view text, Read&& read_root) {
  YamlReader r("t.yaml", no_environment());
  r.read_document(text, [&](const Field& root) { read_root(r, root); });
  return r.take_errors();
}

TEST_CASE("yaml_reader: typed scalars", "[config]") {
  const auto errors =
      read("a: 12\nb: x\nc: -3\nd: 0.5\ne: True\nf: 1e400\n", [](YamlReader& r, const Field& root) {
        const auto m = r.named_mapping(root);
        REQUIRE(m);
        CHECK(r.integer(*m->get("a"), 0, 100) == 12);
        CHECK_FALSE(r.integer(*m->get("b"), 0, 100));
        CHECK_FALSE(r.integer(*m->get("c"), 1, 100));
        CHECK(r.positive_number(*m->get("d")) == 0.5);
        CHECK(r.boolean(*m->get("e")) == true);
        CHECK_FALSE(r.positive_number(*m->get("f")));
      });
  CHECK(errors == std::vector<std::string>{
                      "t.yaml:2: b: expected an integer, got \"x\"",
                      "t.yaml:3: c: must be greater than 0, got -3",
                      "t.yaml:6: f: expected a number, got \"1e400\"",
                  });
}

TEST_CASE("yaml_reader: unknown and duplicate keys, missing required keys", "[config]") {
  const auto errors =
      read("top:\n  size: 1\n  colour: red\n  size: 2\n", [](YamlReader& r, const Field& root) {
        const auto m = r.named_mapping(root);
        const auto top = r.mapping(*m->get("top"), kKeys);
        REQUIRE(top);
        CHECK(top->entries.size() == 1);
        CHECK_FALSE(r.required(*top, "name"));
      });
  CHECK(errors == std::vector<std::string>{
                      "t.yaml:1: top: missing required key \"name\"",
                      "t.yaml:3: top.colour: unknown key \"colour\"",
                      "t.yaml:4: top.size: duplicate key \"size\" (first at line 2)",
                  });
}

TEST_CASE("yaml_reader: a secret's values and keys are never shown", "[config]") {
  const auto errors =
      read("keys: [s3cr3t]\nmore:\n  hunter2: 1\n", [](YamlReader& r, const Field& root) {
        const auto m = r.named_mapping(root);
        Field keys = *m->get("keys");
        keys.secret = true;
        const auto items = r.list(keys);
        REQUIRE(items);
        CHECK_FALSE(r.integer(items->front(), 0, 1));
        Field more = *m->get("more");
        more.secret = true;
        r.mapping(more, kKeys);
      });
  CHECK(errors == std::vector<std::string>{
                      "t.yaml:1: keys[0]: expected an integer",
                      "t.yaml:3: more: unknown key (not shown: this section holds API keys)",
                  });
}

TEST_CASE("yaml_reader: errors sort by line; a later check reports at its mark", "[config]") {
  // All on one line: the order is the order of reading, and the late check
  // stands where its mark was taken.
  const auto errors = read("{a: x, b: y, c: z}\n", [](YamlReader& r, const Field& root) {
    const auto m = r.named_mapping(root);
    r.integer(*m->get("a"), 0, 1);
    const auto mark = r.here();
    r.integer(*m->get("b"), 0, 1);
    r.error_at(mark, *m->get("a"), "late");
    r.error_at(mark, *m->get("a"), "later");
  });
  CHECK(errors == std::vector<std::string>{
                      "t.yaml:1: a: expected an integer, got \"x\"",
                      "t.yaml:1: a: late",
                      "t.yaml:1: a: later",
                      "t.yaml:1: b: expected an integer, got \"y\"",
                  });
}

TEST_CASE("yaml_reader: document shape and syntax", "[config]") {
  const auto ignore = [](YamlReader&, const Field&) {};
  CHECK(read("- a\n", ignore) == std::vector<std::string>{"t.yaml:1: (root): expected a mapping"});
  CHECK(read("a: 1\n---\nb: 2\n", ignore) ==
        std::vector<std::string>{"t.yaml:2: (root): expected a single YAML document"});
  CHECK(read("a: [1\n", ignore) ==
        std::vector<std::string>{"t.yaml:2: syntax error: end of sequence flow not found"});
  CHECK(read("a:\n\tb: 1\n", ignore) ==
        std::vector<std::string>{
            "t.yaml:2: syntax error: a tab in the indentation (YAML indents with spaces only)"});
}

TEST_CASE("yaml_reader: scalars expand the environment", "[config]") {
  YamlReader r("t.yaml", [](std::string_view name) -> std::optional<std::string> {
    if (name == "PORT") return "8080";
    return std::nullopt;
  });
  r.read_document("a: \"${PORT}\"\nb: \"${NOPE}\"\n", [&](const Field& root) {
    const auto m = r.named_mapping(root);
    CHECK(r.integer(*m->get("a"), 0, 65535) == 8080);
    CHECK_FALSE(r.string(*m->get("b")));
  });
  CHECK(r.take_errors() ==
        std::vector<std::string>{"t.yaml:2: b: environment variable NOPE is not set"});
}

}  // namespace
}  // namespace sluice::config
