// From the configuration to the limiter's Redis connection: the client
// options, and the deadline the decision script is given. Pure.
#pragma once

#include <chrono>

#include "gateway/config/config.hpp"
#include "upstream/redis/client.hpp"

namespace sluice {

// How long after it is sent a decision call may still take effect in Redis
// (the deadline the decision script is given): the command timeout less a
// margin for its answer's way back, so that a call Redis runs in time is
// answered before the limiter stops waiting, and one it runs later changes
// nothing.
std::chrono::microseconds script_deadline_after(std::chrono::milliseconds timeout);

// The Redis client options for `config`: the one mapping from the config to a
// connection. Two configs need different connections exactly when their
// options differ.
redis::Options redis_options(const RedisConfig& config);

}  // namespace sluice
