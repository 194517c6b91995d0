// The live cluster as the planner sees it: the head's local devices and what each worker reports
// over its control channel.
#pragma once

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "link/secret.h"
#include "plan/cluster.h"

namespace tandem::cluster {

// The head from its own devices (its GPUs, else its CPU); [cluster] head_memory caps their free
// memory, head_bandwidth sets their bandwidth. A GPU that shares the system memory (ggml's
// integrated GPU, or head_device "unified") is a unified-memory device.
plan::NodeSpec head_node(const config::Config& c);

// A worker as the planner sees it, from its control-channel `status`: the devices its RPC server
// offers (the GPUs, else the CPU), each an offload device for the head, their free memory capped
// by the [[worker]] memory; a GPU that shares the worker's system memory (its `shares_host_memory`,
// or type "igpu" from a worker that does not say, or [[worker]] unified_memory) is a unified-memory
// device.
plan::NodeSpec node_from_status(const config::WorkerConfig& w, const nlohmann::json& status);

// Hears each answer and each failure while query_workers asks a worker: its name and the outcome.
using WorkerAttempt = std::function<void(const std::string& name, const Status& outcome)>;

// Asks each worker of `c` for its devices: the ones its RPC server offers (the GPUs, else the CPU).
// With `wait_until`, unreachable workers are retried until it becomes true; without, the first
// failure is the error (naming the worker). A refused secret or version never waits. `on_attempt`
// (may be empty) is called after every try.
Result<std::vector<plan::NodeSpec>> query_workers(const config::Config& c, const link::Secret& secret,
                                                  const std::atomic<bool>* wait_until,
                                                  const WorkerAttempt& on_attempt = {});

// The head and every worker, asked once, as `tandem serve` would plan them (`tandem plan -c`).
// Errors name the worker that could not be asked.
Result<std::vector<plan::NodeSpec>> live_nodes(const config::Config& config);

}  // namespace tandem::cluster
