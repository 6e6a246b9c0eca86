// The middleware pipeline of one client connection: the request context its
// middleware see, and the walk through the chain. A synchronous step's outcome
// is used at once (nothing posted); an asynchronous step's completion, on the
// worker's executor, resumes the walk after that step. Used on the worker's
// executor only; reused by the connection's requests.
#pragma once

#include <cstddef>


#include "gateway/middleware.hpp"
#include "upstream/http_fields.hpp"

namespace sluice {

class Pipeline {
 public:
  Pipeline();
  ~Pipeline() { end({}); }
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Starts a request whose header lookups read `head` (which outlives the
  // request): the walk starts at the first step, with no response headers
  // (the previous request is ended first, if it was not). The caller fills
  // in the rest of the context.
  RequestContext& begin(const HttpFields& head);
  RequestContext& context() { return ctx_; }

  // Runs the steps after the last one run until one responds or goes pending;
  // kContinue when every step continued.
  MiddlewareResult advance(const MiddlewareChain& chain, MiddlewareLater& later);

  // The exchange has ended: runs the steps' on_end hooks and forgets them
  // (a second call finds none).
  void end(const ExchangeEnd& end);

  // Hands `into` the headers the middleware queued for whatever response goes
  // back, by exchange: the pipeline keeps `into`'s strings (forgotten at the
  // next begin()) to fill again, so that a connection's requests reuse them.
  void take_response_headers(HeaderList& into) {
    into.clear();
    into.swap(ctx_.response_headers);
  }

 private:
  RequestContext ctx_;
  const HttpFields* head_ = nullptr;
  std::size_t next_ = 0;
};

}  // namespace sluice
