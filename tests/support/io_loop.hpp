// Test helper: an io_context kept alive by a work guard and run in 5 ms
// slices until a condition holds or a time limit passes.
#pragma once

#include <chrono>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

namespace sluice::test {

struct Loop {
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard{io.get_executor()};

  // True once pred() holds; false if `limit` passed first.
  template <class Pred>
  bool run_until(Pred pred, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      io.run_for(std::chrono::milliseconds(5));
    }
    return true;
  }
};

}  // namespace sluice::test
