#include "gateway/service_notify.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

namespace sluice {

std::optional<NotifyAddress> notify_address(std::string_view socket) {
  NotifyAddress out;
  out.address.sun_family = AF_UNIX;
  if (socket.size() < 2 || socket.size() >= sizeof out.address.sun_path) return std::nullopt;
  if (socket.front() != '/' && socket.front() != '@') return std::nullopt;
  std::memcpy(out.address.sun_path, socket.data(), socket.size());
  if (socket.front() == '@') out.address.sun_path[0] = '\0';  // abstract: no terminator counted
  out.length = static_cast<unsigned>(offsetof(sockaddr_un, sun_path) + socket.size() +
                                     (socket.front() == '@' ? 0 : 1));
  return out;
}

ServiceNotifier::ServiceNotifier() {
  const char* value = std::getenv("NOTIFY_SOCKET");
  if (!value) return;
  address_ = notify_address(value);
  if (!address_) {
    spdlog::warn("NOTIFY_SOCKET \"{}\" is not a socket path; the service manager is not told",
                 value);
    return;
  }
  socket_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (socket_ < 0) {
    spdlog::warn("NOTIFY_SOCKET: cannot make a socket: {}", std::strerror(errno));
    address_.reset();
  }
}

ServiceNotifier::~ServiceNotifier() {
  if (socket_ >= 0) ::close(socket_);
}

void ServiceNotifier::notify(std::string_view state) {
  if (!address_) return;
  const auto sent =
      ::sendto(socket_, state.data(), state.size(), MSG_NOSIGNAL,
               reinterpret_cast<const sockaddr*>(&address_->address), address_->length);
  if (sent < 0 && !failed_) {
    failed_ = true;
    spdlog::warn("NOTIFY_SOCKET: cannot tell the service manager: {}", std::strerror(errno));
  }
}

}  // namespace sluice
