#include "gateway/config/yaml_reader.hpp"

#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>
#include <tuple>

#include "gateway/config/text.hpp"

namespace sluice::config {
namespace {

int line_of(const YAML::Node& node) {
  const auto mark = node.Mark();
  return mark.is_null() ? 1 : mark.line + 1;
}

int line_of(const YAML::Mark& mark) {
  return mark.is_null() ? 1 : mark.line + 1;
}

// Counts documents without building them, stopping at the second one: the
// line where it starts, or 0 when there is only one. (YAML::LoadAll is not
// used: yaml-cpp 0.7 loops forever on some inputs, e.g. a leading ",".)
class DocumentCounter : public YAML::EventHandler {
 public:
  int documents = 0;
  int second_line = 0;
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents == 2) second_line = mark.line + 1;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

int second_document_line(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentCounter counter;
  while (counter.documents < 2 && parser.HandleNextDocument(counter)) {
  }
  return counter.second_line;
}

// The first line, up to `last_line`, whose indentation holds a tab (0 if none).
// YAML forbids tabs there, and yaml-cpp then reports an unrelated-sounding
// "illegal map value" or "end of map not found".
int tab_indented_line(std::string_view text, int last_line) {
  int line = 1;
  std::size_t start = 0;
  while (start <= text.size() && line <= last_line) {
    const auto end = std::min(text.find('\n', start), text.size());
    const auto content = text.substr(start, end - start);
    const auto first = content.find_first_not_of(" \t");
    // Tabs before the first character of a line with content.
    if (first != std::string_view::npos && content.substr(0, first).find('\t') != content.npos) {
      return line;
    }
    start = end + 1;
    ++line;
  }
  return 0;
}

}  // namespace

const Field* Mapping::get(std::string_view key) const {
  for (const auto& e : entries) {
    if (e.key == key) return &e.value;
  }
  return nullptr;
}

std::string child_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

std::string index_path(const std::string& parent, std::size_t i) {
  return parent + "[" + std::to_string(i) + "]";
}

YamlReader::YamlReader(std::string_view source, EnvLookup env)
    : source_(source), env_(std::move(env)) {}

void YamlReader::read_document(std::string_view yaml_text,
                               const std::function<void(const Field& root)>& read) {
  try {
    const std::string text(yaml_text);
    const YAML::Node root = YAML::Load(text);
    const int extra_document_line = second_document_line(text);
    if (!root.IsMap()) {
      error(line_of(root), "", "expected a mapping");
    } else if (extra_document_line > 0) {
      error(extra_document_line, "", "expected a single YAML document");
    } else {
      read(Field{root, "", line_of(root)});
    }
  } catch (const YAML::ParserException& e) {
    // Syntax errors stop the parse; yaml-cpp reports only the first one.
    errors_.clear();
    const int line = line_of(e.mark);
    if (const int tab_line = tab_indented_line(yaml_text, line)) {
      add(tab_line, source_ + ":" + std::to_string(tab_line) +
                        ": syntax error: a tab in the indentation (YAML indents with spaces only)");
    } else {
      add(line, source_ + ":" + std::to_string(line) + ": syntax error: " + e.msg);
    }
  } catch (const YAML::Exception& e) {
    error(line_of(e.mark), "", e.msg);
  }
}

void YamlReader::add(int line, std::string text) {
  errors_.push_back({line, in_order_++, true, std::move(text)});
}

void YamlReader::error(int line, std::string_view path, std::string_view message) {
  std::string text = source_ + ":" + std::to_string(line) + ": ";
  text += path.empty() ? std::string_view("(root)") : path;
  text += ": ";
  text += message;
  add(line, std::move(text));
}

void YamlReader::error(const Field& f, std::string_view message) {
  error(f.line, f.path, message);
}

void YamlReader::error_at(Mark mark, const Field& f, std::string_view message) {
  error(f, message);
  errors_.back().mark = mark;
  errors_.back().in_order = false;
  --in_order_;
}

std::vector<std::string> YamlReader::take_errors() {
  std::stable_sort(errors_.begin(), errors_.end(), [](const Error& a, const Error& b) {
    return std::tie(a.line, a.mark, a.in_order) < std::tie(b.line, b.mark, b.in_order);
  });
  std::vector<std::string> out;
  for (auto& e : errors_) out.push_back(std::move(e.text));
  return out;
}

void YamlReader::warning(const Field& f, std::string_view message) {
  warnings_.push_back(source_ + ":" + std::to_string(f.line) + ": " + f.path + ": " +
                      std::string(message));
}

std::optional<Mapping> YamlReader::mapping(const Field& f,
                                           std::span<const std::string_view> allowed) {
  if (!f.node.IsMap()) {
    error(f, "expected a mapping" + got_kind(f));
    return std::nullopt;
  }
  const auto is_allowed = [&](const std::string& key) {
    return std::find(allowed.begin(), allowed.end(), key) != allowed.end();
  };
  Mapping m{f, {}};
  std::vector<int> first_lines;
  for (auto it = f.node.begin(); it != f.node.end(); ++it) {
    const YAML::Node key_node = it->first;
    const int key_line = line_of(key_node);
    if (!key_node.IsScalar()) {
      error(key_line, f.path, "keys must be strings");
      continue;
    }
    const std::string key = key_node.Scalar();
    // yaml-cpp 0.7 reads "<<: *anchor" as an ordinary key whose value is the
    // anchored mapping; it does not merge. A plain "<<" (tag "?") is refused
    // once, and the keys it would have brought are not reported missing.
    if (key == "<<" && key_node.Tag() == "?") {
      error(key_line, f.path,
            "YAML merge keys (\"<<\") are not supported: write the keys out (an alias of a "
            "whole value, \"key: *anchor\", works)");
      m.merged = true;
      continue;
    }
    if (f.secret && !allowed.empty() && !is_allowed(key)) {
      error(key_line, f.path, "unknown key (not shown: this section holds API keys)");
      continue;
    }
    const std::string path = child_path(f.path, key);
    if (!allowed.empty() && !is_allowed(key)) {
      error(key_line, path, "unknown key " + shown(key));
      continue;
    }
    const auto dup = std::find_if(m.entries.begin(), m.entries.end(),
                                  [&](const Entry& e) { return e.key == key; });
    if (dup != m.entries.end()) {
      error(key_line, path,
            "duplicate key " + shown(key) + " (first at line " +
                std::to_string(first_lines[dup - m.entries.begin()]) + ")");
      continue;
    }
    first_lines.push_back(key_line);
    // Report at the key's line: a null or block value carries the line after it.
    m.entries.push_back({key, Field{it->second, path, key_line, f.secret}});
  }
  return m;
}

const Field* YamlReader::required(const Mapping& m, std::string_view key) {
  const Field* f = m.get(key);
  if (!f && !m.merged) error(m.self, "missing required key " + shown(key));
  return f;
}

std::optional<std::vector<Field>> YamlReader::list(const Field& f) {
  if (!f.node.IsSequence()) {
    error(f, "expected a list" + got_kind(f));
    return std::nullopt;
  }
  std::vector<Field> items;
  std::size_t i = 0;
  for (auto it = f.node.begin(); it != f.node.end(); ++it, ++i) {
    const YAML::Node item = *it;
    // A null item carries no useful mark; use the list's line then.
    items.push_back(
        {item, index_path(f.path, i), item.IsNull() ? f.line : line_of(item), f.secret});
  }
  return items;
}

std::string YamlReader::got(const Field& f, std::string_view text) {
  return f.secret ? std::string() : ", got " + shown(text);
}

std::string YamlReader::got_number(const Field& f, std::string_view text) {
  return f.secret ? std::string() : ", got " + std::string(text);
}

std::string YamlReader::got_kind(const Field& f) {
  if (f.node.IsSequence()) return ", got a list";
  if (f.node.IsMap()) return ", got a mapping";
  if (f.node.IsNull()) return ", got null";
  return got(f, f.node.Scalar());
}

std::optional<std::string> YamlReader::scalar(const Field& f, std::string_view expected) {
  if (!f.node.IsScalar()) {
    error(f, std::string(expected) + got_kind(f));
    return std::nullopt;
  }
  auto expansion = expand_env(f.node.Scalar(), env_);
  if (!expansion.error.empty()) {
    error(f, expansion.error);
    return std::nullopt;
  }
  return std::move(expansion.text);
}

std::optional<std::string> YamlReader::nonempty_string(const Field& f) {
  auto s = string(f);
  if (s && s->empty()) {
    error(f, "must not be empty");
    return std::nullopt;
  }
  return s;
}

std::optional<std::int64_t> YamlReader::integer(const Field& f, std::int64_t min,
                                                std::int64_t max) {
  const auto text = scalar(f, "expected an integer");
  if (!text) return std::nullopt;
  const std::string& s = *text;
  std::int64_t v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ptr != s.data() + s.size() || s.empty()) {
    error(f, "expected an integer" + got(f, s));
    return std::nullopt;
  }
  const std::string too_small = min == 1   ? "must be greater than 0"
                                : min == 0 ? "must not be negative"
                                           : "must be at least " + std::to_string(min);
  if (r.ec == std::errc::result_out_of_range && s.front() == '-') {
    error(f, too_small + got_number(f, s));
    return std::nullopt;
  }
  if (r.ec == std::errc::result_out_of_range || v > max) {
    error(f, "must be at most " + std::to_string(max) + got_number(f, s));
    return std::nullopt;
  }
  if (v < min) {
    error(f, too_small + got_number(f, s));
    return std::nullopt;
  }
  return v;
}

std::optional<double> YamlReader::positive_number(const Field& f) {
  const auto text = scalar(f, "expected a number");
  if (!text) return std::nullopt;
  const std::string& s = *text;
  double v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size() || !std::isfinite(v)) {
    error(f, "expected a number" + got(f, s));
    return std::nullopt;
  }
  if (v <= 0) {
    error(f, "must be greater than 0" + got_number(f, s));
    return std::nullopt;
  }
  return v;
}

std::optional<bool> YamlReader::boolean(const Field& f) {
  const auto s = scalar(f, "expected true or false");
  if (!s) return std::nullopt;
  if (*s == "true" || *s == "True" || *s == "TRUE") return true;
  if (*s == "false" || *s == "False" || *s == "FALSE") return false;
  error(f, "expected true or false" + got(f, *s));
  return std::nullopt;
}

}  // namespace sluice::config
