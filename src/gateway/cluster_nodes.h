// The live cluster as the planner sees it: the head's local devices and what each worker reports
// over its control channel.
#pragma once

#include <atomic>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "link/secret.h"
#include "plan/cluster.h"

namespace tandem::gateway {

// The head from its own devices (its GPUs, else its CPU); [cluster] head_memory/bandwidth override.
plan::NodeSpec head_node(const config::Config& c);

// A worker as the planner sees it, from its control-channel `status`: the devices its RPC server
// offers (the GPUs, else the CPU), each an offload device for the head.
plan::NodeSpec node_from_status(const config::WorkerConfig& w, const nlohmann::json& status);

// Asks each worker of `c` for its devices: the ones its RPC server offers (the GPUs, else the CPU).
// With `wait_until`, unreachable workers are retried until it becomes true; without, the first
// failure is the error (naming the worker). A refused secret or version never waits.
Result<std::vector<plan::NodeSpec>> query_workers(const config::Config& c, const link::Secret& secret,
                                                  const std::atomic<bool>* wait_until);

// A NodeSource for `tandem plan -c`: the head and the live workers, asked once.
class LiveClusterSource : public plan::NodeSource {
 public:
  explicit LiveClusterSource(config::Config config) : config_(std::move(config)) {}
  Result<std::vector<plan::NodeSpec>> nodes() override;

 private:
  const config::Config config_;
};

}  // namespace tandem::gateway
