// The machines a plan spreads a model over: nodes (the head first, then workers) and their devices,
// with free memory and memory bandwidth, and where that list comes from (NodeSource).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::plan {

// Memory bandwidth assumed when a node does not say (GB10 boxes, the reference deployment).
constexpr double kDefaultBandwidth = 273e9;  // bytes per second
// ggml's RPC client talks to at most this many servers (GGML_RPC_MAX_SERVERS).
constexpr int kMaxRpcServers = 16;
// libllama splits layers over at most this many offload devices (llama_max_devices()).
constexpr int kMaxOffloadDevices = 16;

enum class DeviceKind {
  cpu,  // the host CPU and its memory; on the head its layers are libllama's "CPU layers"
  gpu,  // a GPU (on unified-memory boxes it shares the node's memory with the CPU)
};
const char* device_kind_name(DeviceKind kind);

struct DeviceSpec {
  std::string name;                      // e.g. "GPU0", "CPU", "CUDA0"
  DeviceKind kind = DeviceKind::gpu;     // how libllama uses it: a worker's CPU is an offload device too
  uint64_t free_bytes = 0;               // memory the model may use, before the safety margin
  double bandwidth = kDefaultBandwidth;  // bytes per second
  bool bandwidth_assumed = false;        // not given: kDefaultBandwidth was used
  std::string hardware;                  // what it is, "cpu" or "gpu", when known (reports show it)
  // A GPU that shares its node's system memory (an integrated GPU: NVIDIA GB10). Its free memory
  // is MemAvailable-style, and the plan holds back there what the node keeps beside the model:
  // the prompt cache, the OS's working set, load transients (HostReserve, memory_model.h).
  bool unified_memory = false;
  // free_bytes is what the device itself reported (a live plan), not a declared figure: 0 then
  // means its driver could not be asked, and the planner refuses the device by name.
  bool reported = false;
};

struct NodeSpec {
  std::string name;
  std::string address;  // "host:port" of a worker; "" for the head and for dry runs
  std::vector<DeviceSpec> devices;
};

// Parses a command-line node: "NAME=MEM[@BW]", e.g. "box-a=128GiB@273GB/s" (BW in bytes per
// second, "/s" optional). The node gets one device of `kind` named after it. Errors name the part
// that is wrong.
Result<NodeSpec> parse_node_flag(const std::string& text, DeviceKind kind = DeviceKind::gpu);

// Parses a bandwidth such as "273GB/s", "1.2TB/s", "900GiB/s" into bytes per second.
Result<double> parse_bandwidth(const std::string& text);

// Checks a node list: at least one node, unique non-empty names, at least one device per node,
// at most kMaxRpcServers workers and kMaxOffloadDevices offload devices, no device that reported
// 0 bytes free (an error naming it: ggml gives 0/0 when it cannot ask the driver).
Status validate_nodes(const std::vector<NodeSpec>& nodes);

}  // namespace tandem::plan
