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
  std::string name;          // e.g. "GPU0", "CPU", "CUDA0"
  DeviceKind kind = DeviceKind::gpu;
  uint64_t free_bytes = 0;   // memory the model may use, before the safety margin
  double bandwidth = kDefaultBandwidth;  // bytes per second
  bool bandwidth_assumed = false;        // not given: kDefaultBandwidth was used
};

struct NodeSpec {
  std::string name;
  std::string address;       // "host:port" of a worker; "" for the head and for dry runs
  std::vector<DeviceSpec> devices;
};

// Parses a command-line node: "NAME=MEM[@BW]", e.g. "box-a=128GiB@273GB/s" (BW in bytes per
// second, "/s" optional). The node gets one device of `kind` named after it. Errors name the part
// that is wrong.
Result<NodeSpec> parse_node_flag(const std::string& text, DeviceKind kind = DeviceKind::gpu);

// Parses a bandwidth such as "273GB/s", "1.2TB/s", "900GiB/s" into bytes per second.
Result<double> parse_bandwidth(const std::string& text);

// Where the planner learns the nodes. The head comes first.
class NodeSource {
 public:
  virtual ~NodeSource() = default;
  // The nodes with their devices' free memory and bandwidth, or an error that says which node
  // could not be asked and why.
  virtual Result<std::vector<NodeSpec>> nodes() = 0;
};

// Nodes given up front (dry runs: --node flags or a config's declared nodes).
class StaticNodeSource : public NodeSource {
 public:
  explicit StaticNodeSource(std::vector<NodeSpec> nodes) : nodes_(std::move(nodes)) {}
  Result<std::vector<NodeSpec>> nodes() override { return nodes_; }

 private:
  const std::vector<NodeSpec> nodes_;
};

// The seam for live workers. The plan component cannot reach workers (it does not depend on the
// link), so this reports `unavailable` and never invents figures; `tandem plan -c` and `tandem
// serve` use gateway::LiveClusterSource instead, which asks each worker's control channel.
class LiveNodeSource : public NodeSource {
 public:
  LiveNodeSource(NodeSpec head, std::vector<NodeSpec> workers)
      : head_(std::move(head)), workers_(std::move(workers)) {}
  Result<std::vector<NodeSpec>> nodes() override;

 private:
  const NodeSpec head_;
  const std::vector<NodeSpec> workers_;  // name and address of each worker
};

// Checks a node list: at least one node, unique non-empty names, at least one device per node,
// at most kMaxRpcServers workers and kMaxOffloadDevices offload devices.
Status validate_nodes(const std::vector<NodeSpec>& nodes);

}  // namespace tandem::plan
