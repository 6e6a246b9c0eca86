// The one place a Client is chosen for a topology: standalone gets a
// SingleNodeClient, sentinel a SentinelClient, cluster a ClusterClient.
#pragma once

#include <boost/asio/any_io_executor.hpp>

#include "upstream/redis/client.hpp"

namespace sluice::redis {

// Makes the client options.topology calls for, on `executor`.
ClientFactory client_factory(boost::asio::any_io_executor executor);

}  // namespace sluice::redis
