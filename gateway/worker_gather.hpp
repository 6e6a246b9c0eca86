// Asks every worker for something on its own thread and collects the answers
// on another io_context (the main thread's), so that nothing a worker owns is
// read from outside its thread and no lock is needed.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "gateway/worker.hpp"

namespace sluice {

// Runs `part(worker)` on each worker's thread; once every worker has answered,
// runs `done(results)` on `home` with the results in worker order. With a
// `deadline`, `done` runs at the latest that long after the call; a worker
// that has not answered by then (busy for that long, or its loop stopped)
// keeps its entry of `fallback` (default-constructed results when it is
// empty), and its later answer is dropped. `done` runs exactly once, on
// `home`, and everything the gather holds is released there: a worker only
// ever passes its answer on.
template <class Part, class Done, class Result = std::invoke_result_t<Part&, Worker&>>
void gather_from_workers(const std::vector<std::unique_ptr<Worker>>& workers,
                         boost::asio::io_context& home, Part part, Done done,
                         std::optional<std::chrono::milliseconds> deadline = std::nullopt,
                         std::vector<Result> fallback = {}) {
  struct Gather {
    std::vector<Result> results;
    std::size_t pending;
    Done done;
    bool finished = false;
    std::unique_ptr<boost::asio::steady_timer> timer;

    void finish() {  // on `home`
      if (finished) return;
      finished = true;
      if (timer) timer->cancel();
      Done complete = std::move(done);
      complete(std::move(results));
    }
  };
  fallback.resize(workers.size());
  auto gather = std::make_shared<Gather>(
      Gather{std::move(fallback), workers.size(), std::move(done), false, nullptr});
  if (workers.empty()) return gather->finish();
  if (deadline) {
    gather->timer = std::make_unique<boost::asio::steady_timer>(home, *deadline);
    gather->timer->async_wait([gather](boost::system::error_code ec) {
      if (!ec) gather->finish();
    });
  }
  for (std::size_t i = 0; i < workers.size(); ++i) {
    Worker& worker = *workers[i];
    // The worker hands its reference to the gather on with its answer, so the
    // gather is never released on a worker thread.
    boost::asio::post(worker.io(), [&worker, &home, gather, i, part]() mutable {
      boost::asio::post(home, [gather = std::move(gather), i, result = part(worker)]() mutable {
        if (gather->finished) return;
        gather->results[i] = std::move(result);
        if (--gather->pending == 0) gather->finish();
      });
    });
  }
}

}  // namespace sluice
