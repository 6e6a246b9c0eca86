// Tells a service manager what the process is doing, with systemd's notify
// protocol (a service of Type=notify): each state is one datagram of
// "NAME=value" lines to the Unix socket named by $NOTIFY_SOCKET ("@name": the
// abstract namespace). Without $NOTIFY_SOCKET nothing is sent. Sending never
// blocks and a failure is logged once, never fatal. Main thread only.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <sys/un.h>

namespace sluice {

// The address a $NOTIFY_SOCKET value names, and its length for sendto(); none
// for an empty, relative or over-long value.
struct NotifyAddress {
  sockaddr_un address{};
  unsigned length = 0;
};
std::optional<NotifyAddress> notify_address(std::string_view socket);

class ServiceNotifier {
 public:
  // Reads $NOTIFY_SOCKET once.
  ServiceNotifier();
  ~ServiceNotifier();
  ServiceNotifier(const ServiceNotifier&) = delete;
  ServiceNotifier& operator=(const ServiceNotifier&) = delete;

  bool enabled() const { return address_.has_value(); }
  // Sends `state`, e.g. "READY=1\nSTATUS=serving"; RELOADING=1, STOPPING=1.
  void notify(std::string_view state);

 private:
  std::optional<NotifyAddress> address_;
  int socket_ = -1;
  bool failed_ = false;  // a send failed (logged once)
};

}  // namespace sluice
