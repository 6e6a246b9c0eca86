// The Redis subsystem's errors: one enum and one std::error_category, and the
// `kind` label each error is counted under. Pure; no I/O.
#pragma once

#include <string_view>
#include <system_error>

namespace sluice::redis {

enum class Error {
  kTimeout = 1,     // the command's deadline passed (its late reply is read and dropped)
  kConnect,         // resolve / TCP connect failed or timed out
  kConnectionLost,  // the connection broke (or was deemed stuck) with the command in flight
  kProtocol,        // malformed or unexpected reply, or an unencodable command
  kServer,          // Redis answered with an error reply (reply.str holds the message)
  kNoScript,        // NOSCRIPT: the script is not loaded (evalsha retries this once by itself)
  kNotConnected,    // the client was not ready; the command was not sent
  kTls,             // TLS setup, handshake or peer verification failed
  kAuth,            // AUTH rejected (wrong password, unknown user) or NOAUTH
  kClosed,          // close() was called
};

const std::error_category& category() noexcept;
std::error_code make_error_code(Error e) noexcept;

// The `kind` label of sluice_redis_errors_total for an error from a client:
// "timeout", "protocol", "server", "noscript" or "connect" (everything else).
std::string_view error_kind(std::error_code ec) noexcept;
// Every value error_kind() returns.
inline constexpr std::string_view kErrorKinds[] = {"timeout", "connect", "protocol", "server",
                                                   "noscript"};

}  // namespace sluice::redis

namespace std {
template <>
struct is_error_code_enum<sluice::redis::Error> : true_type {};
}  // namespace std
