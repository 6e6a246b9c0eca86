// The keys that seal and open TLS session tickets, rotated while the process
// runs. The newest key seals every new ticket for `rotation`; then a new key
// takes over, and the replaced one only opens tickets (renewing them with the
// newest) until the tickets it sealed have outlived `lifetime`, the session
// timeout (plus kGrace: OpenSSL counts a session's age in whole seconds); then
// it is wiped. A reload keeps the same keys (the new contexts adopt them), so
// clients resume across a SIGHUP; a restart starts afresh.
//
// Keys are made lazily, on the first ticket sealed after the rotation period,
// from OpenSSL's random generator, and dropped lazily too, by the next
// handshake that seals or opens a ticket. The contexts of every worker share
// one set (a mutex guards it: it is taken once per handshake, not per
// request). The configuration bounds lifetime / rotation, so the set stays small.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

using SSL_CTX = struct ssl_ctx_st;

namespace sluice {

class TicketKeys {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kNameBytes = 16;

  struct Key {
    std::array<unsigned char, kNameBytes> name{};  // in the clear at the front of each ticket
    std::array<unsigned char, 32> hmac{};          // HMAC-SHA256 over the ticket
    std::array<unsigned char, 32> aes{};           // AES-256-CBC of the session
  };
  struct Opening {
    Key key;
    bool newest = false;  // false: the ticket opens, and is replaced by one of the newest key
  };

  // How long past `lifetime` a replaced key still opens tickets.
  static constexpr std::chrono::seconds kGrace{2};

  TicketKeys(Clock::duration rotation, Clock::duration lifetime);
  ~TicketKeys();
  TicketKeys(const TicketKeys&) = delete;
  TicketKeys& operator=(const TicketKeys&) = delete;

  // A reload's periods. They apply at once: the newest key is replaced once it
  // has sealed for the new rotation, and replaced keys are kept for the new
  // lifetime from their retirement (a shorter one drops them sooner).
  void set_periods(Clock::duration rotation, Clock::duration lifetime);

  // The key to seal a new ticket with at `now`: the newest, or a new one when
  // the newest has sealed for `rotation`. nullopt when no random key could be
  // made (no ticket: a TLS 1.2 client resumes from the session cache at best;
  // with OpenSSL 3.0 a TLS 1.3 handshake then fails).
  std::optional<Key> sealing(Clock::time_point now);

  // The key named `name` if tickets it sealed may still be opened at `now`.
  std::optional<Opening> opening(std::span<const unsigned char, kNameBytes> name,
                                 Clock::time_point now);

  // How many keys are held (the newest and those still opening tickets).
  std::size_t size();

  // Makes `context` seal and open its session tickets with these keys (they
  // must outlive it).
  void attach(SSL_CTX* context);

 private:
  struct Held {
    Key key;
    Clock::time_point made;
    Clock::time_point retired = Clock::time_point::max();  // when the next key took over
  };
  // Drops the keys whose tickets have all outlived `lifetime_` (lock held).
  void forget_old(Clock::time_point now);

  std::mutex mutex_;
  Clock::duration rotation_;
  Clock::duration lifetime_;
  // Oldest first; the back one seals. Each key stays where it was made (the
  // vector moves pointers, never key bytes), so wiping it leaves no copy.
  std::vector<std::unique_ptr<Held>> keys_;
};

}  // namespace sluice
