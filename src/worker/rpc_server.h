// The body of the RPC child process (`tandem worker rpc-server`, hidden): ggml's own RPC server
// for the chosen devices. Only the worker starts it, inside its private network namespace.
#pragma once

#include <csignal>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::worker {

struct RpcServerOptions {
  std::string endpoint;              // "127.0.0.1:PORT"
  std::vector<std::string> devices;  // ggml device names; empty: the accelerators, else the CPU
  std::string cache_dir;             // empty: no weight cache
  int threads = 0;                   // 0: all cores
  bool async_input_writes = true;    // datapath/input_writes.h; false: ggml's own writes, one wait each
};

// The signal the worker sends its RPC child after each session: give freed memory back.
inline constexpr int kReleaseMemorySignal = SIGUSR1;

// Serves forever (ggml's server loop never returns unless it fails). Errors: an unknown device
// (the message lists the available ones), no device, a cache folder that cannot be created, or
// ggml's server giving up (it has already printed why).
Status run_rpc_server(const RpcServerOptions& options);

// The devices the child will use for `names` (same rule as run_rpc_server), by name; an error for
// an unknown one. Used by the worker to check --devices before it starts anything.
Result<std::vector<std::string>> resolve_devices(const std::vector<std::string>& names);

}  // namespace tandem::worker
