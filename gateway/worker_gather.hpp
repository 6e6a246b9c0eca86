// Asks every worker for something on its own thread and collects the answers
// on another io_context (the main thread's), so that nothing a worker owns is
// read from outside its thread and no lock is needed.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "gateway/worker.hpp"

namespace sluice {

// Runs `part(worker)` on each worker's thread; once every worker has answered,
// runs `done(results)` on `home` with the results in worker order.
template <class Part, class Done>
void gather_from_workers(const std::vector<std::unique_ptr<Worker>>& workers,
                         boost::asio::io_context& home, Part part, Done done) {
  using Result = std::invoke_result_t<Part&, Worker&>;
  struct Gather {
    std::vector<Result> results;
    std::size_t pending;
    Done done;
  };
  auto gather = std::make_shared<Gather>(
      Gather{std::vector<Result>(workers.size()), workers.size(), std::move(done)});
  if (workers.empty()) return gather->done(std::move(gather->results));
  for (std::size_t i = 0; i < workers.size(); ++i) {
    Worker& worker = *workers[i];
    boost::asio::post(worker.io(), [&worker, &home, gather, i, part]() mutable {
      boost::asio::post(home, [gather, i, result = part(worker)]() mutable {
        gather->results[i] = std::move(result);
        if (--gather->pending == 0) gather->done(std::move(gather->results));
      });
    });
  }
}

}  // namespace sluice
