// `tandem engine --socket`: serves the engine protocol (protocol.h, docs/engine-protocol.md) on a
// Unix socket. The socket accepts connections at once; the model loads in the background while
// status events report the progress to every connection, and submits are refused with
// `unavailable` until it is ready.
#pragma once

#include <atomic>
#include <string>

#include "common/status.h"
#include "engine/model_loader.h"
#include "engine/scheduler.h"

namespace tandem::engine {

struct EngineConfig {
  std::string socket_path;
  LoadOptions load;  // model and placement; the server sets the progress callback
  SchedulerOptions scheduler;
  // CUDA graphs stay on by default (a quarter of decode speed on an H200). Off sets
  // GGML_CUDA_DISABLE_GRAPHS=1 for this process before any backend starts.
  bool cuda_graphs = true;
};

// Serves until `stop` becomes true (checked a few times a second), then ends every request with
// `unavailable`, closes the connections and removes the socket file. Errors only when the socket
// cannot be created; a failed load is reported in status (state "failed") and serving goes on,
// so the gateway can read why.
Status serve_engine(const EngineConfig& config, const std::atomic<bool>& stop);

}  // namespace tandem::engine
