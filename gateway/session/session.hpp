// Where a worker's client connections start (gateway/session/http1_session.hpp is
// the connection itself): serving an accepted socket, and the metrics its
// exchanges count. Every handler of a connection runs on its worker's executor.
#pragma once

#include <memory>

#include "gateway/session/exchange_log.hpp"  // seed_session_metrics
#include "upstream/upstream_pool.hpp"

namespace sluice {

class Worker;
class ServerTls;
struct Config;
class MetricsShard;

using WorkerSocket = WorkerStream::socket_type;

// Starts serving an accepted connection; `socket` must belong to the worker's
// io_context. With `tls` the connection speaks TLS with those contexts.
void start_client_session(Worker& worker, WorkerSocket socket,
                          std::shared_ptr<const ServerTls> tls);

}  // namespace sluice
