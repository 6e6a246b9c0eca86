#include "upstream/redis/client_factory.hpp"

#include "upstream/redis/cluster/cluster_client.hpp"
#include "upstream/redis/sentinel/sentinel_client.hpp"
#include "upstream/redis/single_node_client.hpp"

namespace sluice::redis {

ClientFactory client_factory(boost::asio::any_io_executor executor) {
  return [executor](Options options) -> std::unique_ptr<Client> {
    switch (options.topology) {
      case Topology::kCluster:
        return std::make_unique<ClusterClient>(executor, std::move(options));
      case Topology::kSentinel:
        return std::make_unique<SentinelClient>(executor, std::move(options));
      case Topology::kStandalone:
        break;
    }
    return std::make_unique<SingleNodeClient>(executor, std::move(options));
  };
}

}  // namespace sluice::redis
