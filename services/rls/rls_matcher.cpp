#include "services/rls/rls_matcher.hpp"

namespace sluice {
namespace {

void append_field(std::string& out, std::string_view bytes) {
  out += std::to_string(bytes.size());
  out += ':';
  out += bytes;
}

const RlsRule* find_node(const std::vector<RlsRule>& level, const RlsEntry& entry, bool& by_value) {
  by_value = true;
  for (const RlsRule& rule : level) {
    if (rule.key == entry.first && !rule.wildcard && !rule.value.empty() &&
        rule.value == entry.second) {
      return &rule;
    }
  }
  for (const RlsRule& rule : level) {
    if (rule.key == entry.first && rule.wildcard && rls_wildcard_match(rule.value, entry.second)) {
      return &rule;
    }
  }
  by_value = false;
  for (const RlsRule& rule : level) {
    if (rule.key == entry.first && rule.value.empty()) return &rule;
  }
  return nullptr;
}

RlsMatch match_entries(const RlsDomain& domain, std::span<const RlsEntry> entries) {
  RlsMatch match;
  if (entries.empty()) return match;
  const std::vector<RlsRule>* level = &domain.descriptors;
  const RlsRule* node = nullptr;
  bool detailed = false;
  std::string detailed_key = domain.domain;
  append_field(match.bucket_input, "rls");
  append_field(match.bucket_input, domain.domain);
  std::size_t last_start = 0;  // where the last entry's fields begin in bucket_input
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const RlsEntry& entry = entries[i];
    bool by_value = false;
    node = find_node(*level, entry, by_value);
    if (!node) return RlsMatch{};
    if (node->api_key && match.api_key_entry == std::string_view::npos) match.api_key_entry = i;
    last_start = match.bucket_input.size();
    detailed = detailed || node->detailed_metric || node->value_to_metric;
    detailed_key += '.';
    detailed_key += entry.first;
    if (by_value || node->value_to_metric || node->detailed_metric) {
      detailed_key += '_';
      detailed_key += node->share_threshold ? std::string_view(node->value) : entry.second;
    }
    append_field(match.bucket_input, entry.first);
    append_field(match.bucket_input, node->share_threshold ? std::string_view(node->value)
                                                           : entry.second);
    level = &node->children;
  }
  if (!node->limit && !node->unlimited) return RlsMatch{};
  if (node->concurrency()) {
    // The bucket is the entries above the request's id.
    match.bucket_input.resize(last_start);
    match.slot_name = entries.back().second;
  }
  match.rule = node;
  match.metric_key = detailed ? detailed_key : node->stat_key;
  return match;
}

}  // namespace

bool rls_wildcard_match(std::string_view pattern, std::string_view value) {
  // Greedy with backtracking to the last '*': linear in practice, and
  // bounded by pattern × value (both bounded by the configuration and the
  // message size).
  std::size_t p = 0;
  std::size_t v = 0;
  std::size_t star = std::string_view::npos;
  std::size_t resume = 0;
  while (v < value.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = v;
    } else if (p < pattern.size() && pattern[p] == value[v]) {
      ++p;
      ++v;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      v = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

RlsMatch match_rls_descriptor(const RlsDomain& domain, std::span<const RlsEntry> entries) {
  RlsMatch match = match_entries(domain, entries);
  if (match.rule || entries.size() < 2 || entries.back().first != kRlsReleaseEntry) return match;
  match = match_entries(domain, entries.first(entries.size() - 1));
  if (match.rule && match.rule->concurrency()) {
    match.release = true;
    return match;
  }
  return RlsMatch{};
}

std::string rls_override_bucket(std::string_view domain, std::span<const RlsEntry> entries) {
  std::string out = "override:";
  append_field(out, domain);
  for (const auto& [key, value] : entries) {
    append_field(out, key);
    append_field(out, value);
  }
  return out;
}

}  // namespace sluice
