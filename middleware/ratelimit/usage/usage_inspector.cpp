#include "middleware/ratelimit/usage/usage_inspector.hpp"

#include <algorithm>

#include "common/ascii.hpp"

namespace sluice::usage {
namespace {

// The largest usage a settlement takes (as parse_usage for a header).
constexpr double kMaxUsage = 9007199254740992.0;  // 2^53

// The media type of a Content-Type value, without parameters.
std::string_view media_type(std::string_view content_type) {
  return ascii::trim(content_type.substr(0, content_type.find(';')));
}

bool is_json(std::string_view type) {
  if (ascii::iequals(type, "application/json")) return true;
  // application/problem+json, application/vnd.foo+json...
  return type.size() > 5 && ascii::iequals(type.substr(type.size() - 5), "+json");
}

bool any_invalid(std::span<const TermValue> found) {
  return std::any_of(found.begin(), found.end(),
                     [](const TermValue& t) { return t.state == TermState::kInvalid; });
}

}  // namespace

std::string_view body_usage_name(BodyUsage outcome) {
  switch (outcome) {
    case BodyUsage::kFound: return "found";
    case BodyUsage::kMissing: return "missing";
    case BodyUsage::kInvalid: return "invalid";
    case BodyUsage::kTruncated: return "truncated";
    case BodyUsage::kUnreadable: return "unreadable";
  }
  return "missing";
}

UsageInspector::UsageInspector(const UsageExpression& expression, std::size_t max_inspect_bytes)
    : expression_(expression), max_bytes_(max_inspect_bytes) {}

void UsageInspector::response_head(unsigned status, std::string_view content_type,
                                   std::string_view content_encoding) {
  (void)status;  // the settlement decides which statuses count
  json_.reset();
  events_.reset();
  inflater_.reset();
  const std::string_view type = media_type(content_type);
  if (ascii::iequals(type, "text/event-stream")) {
    kind_ = Kind::kEvents;
    events_.emplace(expression_, max_bytes_);
  } else if (is_json(type)) {
    kind_ = Kind::kJson;
    json_.emplace(expression_, max_bytes_);
  } else {
    kind_ = Kind::kUnreadable;
    return;
  }
  const std::string_view coding = ascii::trim(content_encoding);
  if (coding.empty() || ascii::iequals(coding, "identity")) return;
  inflater_ = Inflater::for_encoding(coding);
  if (!inflater_) kind_ = Kind::kUnreadable;  // br, zstd, a list of codings...
}

bool UsageInspector::scanning() const {
  switch (kind_) {
    case Kind::kJson: return !json_->stopped() && !json_->complete();
    case Kind::kEvents: return true;
    default: return false;
  }
}

void UsageInspector::scan(std::string_view decoded) {
  if (kind_ == Kind::kJson) {
    json_->feed(decoded);
  } else {
    events_->feed(decoded);
  }
}

void UsageInspector::response_body(std::string_view piece) {
  if (!scanning()) return;
  if (!inflater_) return scan(piece);
  while (scanning()) {
    const std::size_t before = piece.size();
    const std::string_view decoded = inflater_->decode(piece);
    if (inflater_->failed()) {
      kind_ = Kind::kUnreadable;
      return;
    }
    if (!decoded.empty()) scan(decoded);
    if (decoded.empty() && piece.size() == before) return;  // wants more input
  }
}

void UsageInspector::response_end() {
  if (kind_ == Kind::kEvents) events_->finish();
}

std::optional<double> UsageInspector::usage() const {
  std::optional<double> total;
  if (kind_ == Kind::kJson) total = usage_total(expression_, json_->found());
  if (kind_ == Kind::kEvents) total = usage_total(expression_, events_->found());
  if (total && (!(*total >= 0) || *total > kMaxUsage)) return std::nullopt;
  return total;
}

BodyUsage UsageInspector::outcome() const {
  switch (kind_) {
    case Kind::kNone: return BodyUsage::kMissing;
    case Kind::kUnreadable: return BodyUsage::kUnreadable;
    case Kind::kJson:
    case Kind::kEvents: break;
  }
  const auto found = kind_ == Kind::kJson ? json_->found() : events_->found();
  if (usage()) return BodyUsage::kFound;
  if (any_invalid(found) || usage_total(expression_, found)) return BodyUsage::kInvalid;
  const bool truncated =
      kind_ == Kind::kJson ? json_->truncated() : events_->truncated_events() > 0;
  return truncated ? BodyUsage::kTruncated : BodyUsage::kMissing;
}

}  // namespace sluice::usage
