// tracing: where spans go (an OTLP/HTTP collector), which traces are sampled,
// what the resource says of this process, and how the export is bounded.
#include <charconv>
#include <cmath>

#include "common/ascii.hpp"
#include "gateway/config/keys.hpp"
#include "gateway/config/sections.hpp"
#include "gateway/config/text.hpp"

namespace sluice::config {
namespace {

constexpr std::int64_t kMaxQueueSpans = 1'000'000;
constexpr std::int64_t kMaxBatchSpans = 10'000;
constexpr std::int64_t kMaxFlushMs = 60'000;
constexpr std::int64_t kMaxTimeoutMs = 60'000;
constexpr std::size_t kMaxPairs = 64;

// Headers the export writes itself, or that would change its framing.
constexpr std::string_view kOwnHeaders[] = {
    "host",    "content-length", "transfer-encoding", "connection", "content-type",
    "te",      "upgrade",        "keep-alive",        "expect",     "proxy-connection",
    "trailer", "user-agent"};

bool own_header(std::string_view name) {
  for (const auto own : kOwnHeaders) {
    if (ascii::iequals(name, own)) return true;
  }
  return false;
}

// sampling_ratio: a number from 0 to 1.
void read_ratio(YamlReader& r, const Field& f, TracingConfig& t) {
  const auto text = r.scalar(f, "expected a number from 0 to 1");
  if (!text) return;
  double v = 0;
  const auto res = std::from_chars(text->data(), text->data() + text->size(), v);
  if (text->empty() || res.ec != std::errc() || res.ptr != text->data() + text->size() ||
      !std::isfinite(v) || v < 0 || v > 1) {
    return r.error(f, "expected a number from 0 to 1" + YamlReader::got_number(f, *text));
  }
  t.sampling_ratio = v;
}

// A mapping of names to strings: the resource's attributes, or the export's
// headers (`header_names`: HTTP field names and values without line breaks).
void read_pairs(YamlReader& r, const Field& f, bool header_names,
                std::vector<std::pair<std::string, std::string>>& out) {
  const auto m = r.named_mapping(f);
  if (!m) return;
  if (m->entries.size() > kMaxPairs) return r.error(f, "at most 64 entries");
  for (const auto& entry : m->entries) {
    const auto value = r.string(entry.value);
    if (!value) continue;
    if (header_names && !is_token(entry.key)) {
      r.error(entry.value, "not an HTTP header name: " + shown(entry.key));
    } else if (header_names && own_header(entry.key)) {
      r.error(entry.value, "Sluice sets " + entry.key + " itself");
    } else if (header_names && value->find_first_of("\r\n") != std::string::npos) {
      r.error(entry.value, "a header value must not contain a line break");
    } else if (entry.key.empty()) {
      r.error(entry.value, "an empty name");
    } else {
      out.emplace_back(entry.key, *value);
    }
  }
}

}  // namespace

void read_tracing(YamlReader& r, const Field& f, Config& c) {
  const auto m = r.mapping(f, kTracingKeys.keys);
  if (!m) return;
  TracingConfig& t = c.tracing;
  if (auto* v = r.required(*m, "endpoint")) {
    if (auto text = r.nonempty_string(*v)) {
      std::string error;
      if (auto url = parse_http_url(*text, error)) {
        t.endpoint = std::move(*url);
      } else {
        r.error(*v, error + ": " + shown(*text));
      }
    }
  }
  if (auto* v = m->get("sampling_ratio")) read_ratio(r, *v, t);
  if (auto* v = m->get("parent_based")) {
    if (auto b = r.boolean(*v)) t.parent_based = *b;
  }
  if (auto* v = m->get("service_name")) {
    if (auto s = r.nonempty_string(*v)) t.service_name = *s;
  }
  if (auto* v = m->get("resource_attributes")) read_pairs(r, *v, false, t.resource_attributes);
  if (auto* v = m->get("headers")) read_pairs(r, *v, true, t.headers);
  if (auto* v = m->get("max_queue_spans")) {
    if (auto n = r.integer(*v, 1, kMaxQueueSpans)) t.max_queue_spans = static_cast<std::size_t>(*n);
  }
  if (auto* v = m->get("max_batch_spans")) {
    if (auto n = r.integer(*v, 1, kMaxBatchSpans)) t.max_batch_spans = static_cast<std::size_t>(*n);
  }
  if (auto* v = m->get("flush_interval_ms")) {
    if (auto n = r.integer(*v, 1, kMaxFlushMs)) t.flush_interval = std::chrono::milliseconds(*n);
  }
  if (auto* v = m->get("timeout_ms")) {
    if (auto n = r.integer(*v, 1, kMaxTimeoutMs)) t.timeout = std::chrono::milliseconds(*n);
  }
  const Field* tls = m->get("tls");
  if (tls) {
    t.tls = read_client_tls(r, *tls, kTracingTlsKeys, "tracing.tls", t.tls_config);
  }
  if (t.endpoint.tls && !t.tls && !tls) {
    std::string error;
    t.tls = UpstreamTls::build(UpstreamTlsConfig{}, error);
    if (!t.tls) r.error(f, error);
  }
}

}  // namespace sluice::config
