// Something that reads a response body as it is relayed to the client,
// without holding it up or changing it: the rate-limit step's usage reader
// (cost_from_response.body). A request step makes one; the exchange tells it
// what passes. Header-only vocabulary: the middleware implements it, the
// exchange calls it, neither knows the other.
#pragma once

#include <string_view>

namespace sluice {

class BodyObserver {
 public:
  virtual ~BodyObserver() = default;
  // The response head about to go to the client: its status and the values
  // of its Content-Type and Content-Encoding ("" when absent). A retried
  // attempt's dropped answer is never seen; a head starts the reading over.
  virtual void response_head(unsigned status, std::string_view content_type,
                             std::string_view content_encoding) = 0;
  // The next piece of the body, as it goes to the client.
  virtual void response_body(std::string_view piece) = 0;
  // The body ended whole (not called for one cut short).
  virtual void response_end() = 0;
};

}  // namespace sluice
