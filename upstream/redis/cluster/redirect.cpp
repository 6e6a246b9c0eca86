#include "upstream/redis/cluster/redirect.hpp"

#include <charconv>

#include "upstream/redis/cluster/slot.hpp"

namespace sluice::redis::cluster {
namespace {

template <class Int>
std::optional<Int> parse_number(std::string_view text, unsigned long max) {
  unsigned long value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || ptr != end || value > max) return std::nullopt;
  return static_cast<Int>(value);
}

// "<slot> <host>:<port>": the port follows the last ':' (an IPv6 host keeps
// its own colons and comes without brackets).
std::optional<Redirect> parse_target(Redirect::Kind kind, std::string_view rest) {
  const auto space = rest.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const auto slot = parse_number<std::uint16_t>(rest.substr(0, space), kSlotCount - 1);
  const std::string_view address = rest.substr(space + 1);
  const auto colon = address.rfind(':');
  if (!slot || colon == std::string_view::npos) return std::nullopt;
  const auto port = parse_number<std::uint16_t>(address.substr(colon + 1), 65535);
  const std::string_view host = address.substr(0, colon);
  if (!port || *port == 0 || host.find(' ') != std::string_view::npos) return std::nullopt;
  return Redirect{kind, *slot, std::string(host), *port};
}

// The text after `word` and one space when `text` starts with that word;
// nullopt otherwise.
std::optional<std::string_view> after_word(std::string_view text, std::string_view word) {
  if (text.substr(0, word.size()) != word) return std::nullopt;
  if (text.size() == word.size()) return std::string_view{};
  if (text[word.size()] != ' ') return std::nullopt;
  return text.substr(word.size() + 1);
}

}  // namespace

std::optional<Redirect> parse_redirect(std::string_view error) {
  if (const auto rest = after_word(error, "MOVED")) {
    return parse_target(Redirect::Kind::kMoved, *rest);
  }
  if (const auto rest = after_word(error, "ASK")) return parse_target(Redirect::Kind::kAsk, *rest);
  if (after_word(error, "TRYAGAIN")) return Redirect{Redirect::Kind::kTryAgain, 0, {}, 0};
  if (after_word(error, "CLUSTERDOWN")) return Redirect{Redirect::Kind::kClusterDown, 0, {}, 0};
  return std::nullopt;
}

NextStep next_step(bool is_error, std::string_view error_text, std::string_view answering_host,
                   unsigned resends) {
  using Kind = NextStep::Kind;
  if (!is_error) return {};
  auto redirect = parse_redirect(error_text);
  if (!redirect) return {};
  if (redirect->kind == Redirect::Kind::kClusterDown) return {Kind::kClusterDown, 0, {}};
  if (resends >= kMaxRedirects) return {};
  if (redirect->kind == Redirect::Kind::kTryAgain) return {Kind::kRetryLater, 0, {}};
  NodeAddress target{redirect->host.empty() ? std::string(answering_host) : redirect->host,
                     redirect->port};
  const Kind kind =
      redirect->kind == Redirect::Kind::kMoved ? Kind::kFollowMoved : Kind::kFollowAsk;
  return {kind, redirect->slot, std::move(target)};
}

}  // namespace sluice::redis::cluster
