// What a worker answers to the control op "status" (docs/protocol.md): one struct, written by the
// worker (worker/worker.cpp) and read by the head (the supervisor, the restart's memory check,
// `tandem doctor`, the planner's live nodes) through the same pair of functions.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::link {

struct WorkerDevice {
  std::string name;         // ggml's device name, e.g. "CUDA0", "CPU"
  std::string description;  // e.g. "NVIDIA H200"
  std::string type;         // "cpu", "gpu", "igpu", "accel"
  uint64_t free_bytes = 0, total_bytes = 0;
  // Its memory is the machine's (a CPU, an integrated GPU). A worker of an earlier build does not
  // say: read as type "igpu".
  bool shares_host_memory = false;
  bool operator==(const WorkerDevice&) const = default;
};

// A process holding much of the worker machine's memory (largest first).
struct WorkerMemoryHolder {
  int pid = 0;
  std::string name;
  uint64_t bytes = 0;  // resident
  bool operator==(const WorkerMemoryHolder&) const = default;
};

// The worker's ggml RPC server child (worker/rpc_child.h).
struct WorkerRpcServer {
  std::string state;  // "starting", "running", "restarting", "stopped"
  int pid = 0;
  uint64_t restarts = 0;
  std::string last_exit;
  bool isolated = false;
  std::string isolation;
  uint16_t port = 0;
  bool cuda_graphs = true;
  bool async_input_writes = true;
  bool operator==(const WorkerRpcServer&) const = default;
};

// The head the worker serves now.
struct WorkerHead {
  std::string name, address, since;
  bool operator==(const WorkerHead&) const = default;
};

struct WorkerStatus {
  std::string name, version, llama_tag, llama_commit;
  int protocol = 0;
  double uptime_s = 0;
  std::vector<WorkerDevice> devices;
  std::vector<WorkerMemoryHolder> memory_holders;
  WorkerRpcServer rpc_server;
  uint64_t bytes_from_head = 0, bytes_to_head = 0;
  uint64_t connections_accepted = 0, connections_refused = 0;
  std::string cache_dir;  // the weight cache ("": none)
  uint64_t cache_entries = 0, cache_bytes = 0, cache_max_bytes = 0;
  std::optional<WorkerHead> head;  // none: free
  std::string last_event;
  bool operator==(const WorkerStatus&) const = default;
};

// The JSON on the wire, as the worker has always written it.
nlohmann::json worker_status_json(const WorkerStatus& status);
// Lenient, as the head's readers have been: a field that is missing or of another type reads as
// its default, so a worker of an earlier build still answers.
WorkerStatus worker_status_from(const nlohmann::json& j);

}  // namespace tandem::link
