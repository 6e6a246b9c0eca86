// The worker's executor and the TCP stream bound to it. Streams are bound to
// the executor type directly rather than to the type-erased any_io_executor,
// which costs a copy per operation.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/basic_stream.hpp>

namespace sluice {

using WorkerExecutor = boost::asio::io_context::executor_type;
using WorkerStream = boost::beast::basic_stream<boost::asio::ip::tcp, WorkerExecutor,
                                                boost::beast::unlimited_rate_policy>;

}  // namespace sluice
