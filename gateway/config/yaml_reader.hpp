// A validated reader of YAML documents. It knows YAML, not Sluice: typed
// scalars with ${VAR} expansion (see env.hpp), mappings with unknown and
// duplicate keys rejected, lists, and every error placed as
// "file:line: key.path: message". Used only while loading a configuration,
// the one place where exceptions are allowed.
//
// Errors come out sorted by line; errors on one line keep the order in which
// the document was read. A later pass that checks a value reports at the mark
// taken where that value was read, so its errors stand where they would have
// stood had the check been made right then.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/config/env.hpp"

namespace sluice::config {

// A YAML node with where it is: its key path and the line to report.
struct Field {
  YAML::Node node;
  std::string path;
  int line = 1;
  // A secret's values are never shown in messages (nor its keys: a list of
  // API keys written as a mapping would have the keys as keys).
  bool secret = false;
};

struct Entry {
  std::string key;
  Field value;
};

struct Mapping {
  Field self;
  std::vector<Entry> entries;  // in file order, duplicates removed
  bool merged = false;         // had a "<<" merge key: missing keys are not reported

  const Field* get(std::string_view key) const;
};

// "a.b" below "a"; "b" below the root ("").
std::string child_path(const std::string& parent, std::string_view key);
// "a[2]".
std::string index_path(const std::string& parent, std::size_t i);

class YamlReader {
 public:
  // A place in the reading, for errors reported by a later pass.
  using Mark = std::size_t;

  YamlReader(std::string_view source, EnvLookup env);

  // Parses `text` as a single YAML document with a mapping at its root and
  // hands the root to `read`. A syntax error ends the reading as the only error;
  // another root, a second document, or an error yaml-cpp raises while `read`
  // walks the nodes is reported like any other.
  void read_document(std::string_view text, const std::function<void(const Field& root)>& read);

  void error(int line, std::string_view path, std::string_view message);
  void error(const Field& f, std::string_view message);
  // Reports as if at `mark`: after the errors reported before it was taken.
  void error_at(Mark mark, const Field& f, std::string_view message);
  Mark here() const { return in_order_; }
  const EnvLookup& env() const { return env_; }
  bool has_errors() const { return !errors_.empty(); }
  // Every error, in file order.
  std::vector<std::string> take_errors();

  void warning(const Field& f, std::string_view message);
  std::vector<std::string> take_warnings() { return std::move(warnings_); }

  // A mapping whose keys must be among `allowed`; or, with `allowed` empty, a
  // mapping of user-chosen names. Duplicate keys are errors.
  std::optional<Mapping> mapping(const Field& f, std::span<const std::string_view> allowed);
  std::optional<Mapping> named_mapping(const Field& f) { return mapping(f, {}); }
  // The value of `key`, or an error naming the missing key.
  const Field* required(const Mapping& m, std::string_view key);
  std::optional<std::vector<Field>> list(const Field& f);

  // The text of a scalar, environment variables expanded; nullopt (with the
  // error reported) when it is not a scalar or cannot be expanded.
  std::optional<std::string> scalar(const Field& f, std::string_view expected);
  std::optional<std::string> string(const Field& f) { return scalar(f, "expected a string"); }
  std::optional<std::string> nonempty_string(const Field& f);
  std::optional<std::int64_t> integer(const Field& f, std::int64_t min, std::int64_t max);
  // A finite number greater than 0 (fractions allowed).
  std::optional<double> positive_number(const Field& f);
  std::optional<bool> boolean(const Field& f);

  // ", got VALUE" for a message about a scalar, VALUE as read (after
  // environment expansion); nothing for a secret.
  static std::string got(const Field& f, std::string_view text);
  // The same for a number that was read: shown without quotes.
  static std::string got_number(const Field& f, std::string_view text);
  // ", got a list" etc. for a value of the wrong kind; a scalar as written.
  static std::string got_kind(const Field& f);

 private:
  struct Error {
    int line;
    Mark mark;
    bool in_order;  // reported while reading, not at an earlier mark
    std::string text;
  };
  void add(int line, std::string text);

  std::string source_;
  EnvLookup env_;
  std::vector<Error> errors_;
  Mark in_order_ = 0;  // errors reported while reading
  std::vector<std::string> warnings_;
};

}  // namespace sluice::config
