// One client connection (style.md habit 1): it owns its stream, read buffer
// and parsers, and is kept alive only by the handlers that hold it. Every
// handler runs on the owning worker's executor.
#pragma once

#include <memory>

#include "upstream/upstream_pool.hpp"

namespace sluice {

class Worker;

using WorkerSocket = WorkerStream::socket_type;

// Starts serving an accepted connection; `socket` must belong to the worker's io_context.
void start_client_session(Worker& worker, WorkerSocket socket);

}  // namespace sluice
