// One client connection: it owns its stream, read buffer
// and parsers, and is kept alive only by the handlers that hold it. Every
// handler runs on the owning worker's executor.
#pragma once

#include <memory>

#include "gateway/exchange_log.hpp"  // seed_session_metrics
#include "upstream/upstream_pool.hpp"

namespace sluice {

class Worker;
struct Config;
class MetricsShard;

using WorkerSocket = WorkerStream::socket_type;

// Starts serving an accepted connection; `socket` must belong to the worker's io_context.
void start_client_session(Worker& worker, WorkerSocket socket);

}  // namespace sluice
