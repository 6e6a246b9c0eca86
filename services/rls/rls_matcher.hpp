// Which rule of a domain's descriptor tree a request's descriptor reaches,
// as envoyproxy/ratelimit matches: entry by entry down the tree, each entry
// taking the node of its key and exact value, else the first node whose
// value pattern ('*' for any run of bytes) holds it, else the node of its key
// with no value; the descriptor's last entry must end at a node with a
// rate_limit. A concurrency limit's rule takes the request's id as its last
// entry, and a release call adds the release entry after it. Pure.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "gateway/config/rls_config.hpp"

namespace sluice {

using RlsEntry = std::pair<std::string_view, std::string_view>;  // key, value

struct RlsMatch {
  const RlsRule* rule = nullptr;  // null: no rule limits this descriptor
  // What names its bucket: the domain and every entry, length-prefixed (a
  // share_threshold node's pattern in place of the value it matched).
  // Raw request data: hash it, never write it anywhere.
  std::string bucket_input;
  // Its label in the metrics: the rule's stat_key, or with detailed_metric
  // (or value_to_metric on a node) the values the request gave.
  std::string metric_key;
  // The entry an api_key node matched (its value is an API key); npos: none.
  std::size_t api_key_entry = std::string_view::npos;
  // A concurrency limit's rule: the request's id (the last entry's value,
  // left out of bucket_input), and whether the descriptor is its release
  // (the same entries and then the release entry).
  std::string_view slot_name;
  bool release = false;
};

// `pattern` with '*' standing for any run of bytes holds `value`.
bool rls_wildcard_match(std::string_view pattern, std::string_view value);

RlsMatch match_rls_descriptor(const RlsDomain& domain, std::span<const RlsEntry> entries);

// The bucket of a limit override no rule matched: the domain and the entries
// as given, length-prefixed as above (raw request data too).
std::string rls_override_bucket(std::string_view domain, std::span<const RlsEntry> entries);

}  // namespace sluice
