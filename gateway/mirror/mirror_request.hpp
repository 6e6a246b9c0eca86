// One mirrored request (routes[].mirror): a copy of a request's head and
// body sent to the mirror upstream by an exchange of its own, its answer read
// and dropped. It keeps itself alive while its exchange runs, owns what the
// exchange reads (the head, the body, a relay buffer), and affects nothing
// of the real request: it starts once the real exchange has ended (its body
// then read whole), on the same worker. Its attempts do not count for the
// servers' outlier detection.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "gateway/config/config.hpp"

namespace sluice {

class Worker;
struct UpstreamHead;

struct MirrorCopy {
  const UpstreamHead* head = nullptr;  // as it went to the real upstream
  std::string_view body;               // the whole request body
  bool chunked = false;                // the body goes chunked (as the real one did)
};

// Counts one request of `route` in sluice_mirror_requests_total: answered,
// failed or skipped.
void count_mirror(Worker& worker, std::string_view route, std::string_view outcome);

// Sends the copy to `route`'s mirror upstream (of `config`); the route's
// count of mirrors in flight on the worker was taken (RouteMirrors::take)
// and is released when the mirror ends (or could not be made). Never throws.
void send_mirror(Worker& worker, std::shared_ptr<const Config> config, const RouteConfig& route,
                 const MirrorCopy& copy);

}  // namespace sluice
