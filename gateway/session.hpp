// One client connection: it owns its stream, read buffer
// and parsers, and is kept alive only by the handlers that hold it. Every
// handler runs on the owning worker's executor.
#pragma once

#include <memory>

#include "upstream/upstream_pool.hpp"

namespace sluice {

class Worker;
struct Config;
class MetricsShard;

using WorkerSocket = WorkerStream::socket_type;

// Starts serving an accepted connection; `socket` must belong to the worker's io_context.
void start_client_session(Worker& worker, WorkerSocket socket);

// A zero series for every label combination the sessions of `config` can
// count: request duration per route, upstream exchanges per upstream and
// outcome, upstream connections per upstream. At startup and after a reload.
void seed_session_metrics(const Config& config, MetricsShard& metrics);

}  // namespace sluice
