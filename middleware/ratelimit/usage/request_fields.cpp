#include "middleware/ratelimit/usage/request_fields.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

#include <nlohmann/json.hpp>

namespace sluice::usage {
namespace {

using json = nlohmann::json;

// Follows the parse: the member path of the value being read, and takes the
// values whose paths are asked for.
class FieldReader final : public nlohmann::json_sax<json> {
 public:
  FieldReader(std::span<const std::string> paths, BodyFields& out) : paths_(paths), out_(out) {}

  bool null() override { return scalar_done(); }
  bool boolean(bool) override { return scalar_done(); }
  bool number_integer(number_integer_t n) override { return take(std::to_string(n), true); }
  bool number_unsigned(number_unsigned_t n) override { return take(std::to_string(n), true); }
  bool number_float(number_float_t, const string_t& text) override { return take(text, true); }
  bool string(string_t& value) override { return take(value, false); }
  bool binary(binary_t&) override { return scalar_done(); }
  bool start_object(std::size_t) override { return open(true); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_array() override { return close(); }
  bool key(string_t& name) override {
    if (depth_ == objects_ && depth_ <= kMaxPathDepth) {
      path_.resize(path_starts_.back());
      if (depth_ > 1) path_ += '.';
      path_ += name;
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  static constexpr std::size_t kMaxPathDepth = 8;

  bool open(bool object) {
    if (++depth_ > kMaxBodyDepth) return false;  // stops the parse
    if (object && objects_ + 1 == depth_) {
      ++objects_;
      path_starts_.push_back(path_.size());
    }
    return true;
  }
  bool close() {
    if (objects_ == depth_) {
      --objects_;
      path_.resize(path_starts_.back());
      path_starts_.pop_back();
    }
    --depth_;
    return true;
  }
  bool scalar_done() { return true; }
  bool take(const std::string& value, bool number) {
    // Only a member of objects all the way from the root.
    if (depth_ == 0 || depth_ != objects_ || depth_ > kMaxPathDepth) return true;
    if (value.size() > kMaxFieldValueBytes) return true;
    for (const auto& path : paths_) {
      if (path != path_) continue;
      auto it = std::find_if(out_.begin(), out_.end(),
                             [&](const BodyField& f) { return f.path == path; });
      if (it == out_.end()) {
        out_.push_back({path, value, number});
      } else {
        *it = {path, value, number};  // the last one counts
      }
    }
    return true;
  }

  std::span<const std::string> paths_;
  BodyFields& out_;
  std::size_t depth_ = 0;    // containers open
  std::size_t objects_ = 0;  // of which the outermost ones that are all objects
  std::string path_;         // the member path at objects_ depth
  std::vector<std::size_t> path_starts_{0};
};

}  // namespace

void read_body_fields(std::string_view body, std::span<const std::string> paths, BodyFields& out) {
  if (paths.empty()) return;
  FieldReader reader(paths, out);
  json::sax_parse(body.begin(), body.end(), &reader, nlohmann::detail::input_format_t::json, false);
}

const BodyField* body_field(const BodyFields& fields, std::string_view path) {
  for (const auto& field : fields) {
    if (field.path == path) return &field;
  }
  return nullptr;
}

std::optional<double> body_number(const BodyFields& fields, std::string_view path) {
  for (const auto& [p, v, number] : fields) {
    if (p != path || !number) continue;
    double value = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
    if (ec != std::errc{} || end != v.data() + v.size() || !std::isfinite(value) || value < 0) {
      return std::nullopt;
    }
    return value;
  }
  return std::nullopt;
}

}  // namespace sluice::usage
