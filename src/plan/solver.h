// The placement solver: contiguous layer ranges over every device of every node, chosen to
// minimise the estimated time per generated token under each device's memory.
//
// Devices take the layers in order: on a CPU head, the head's CPU, then each worker's devices; on a
// GPU head, each worker's devices, then the head's GPUs (llama.cpp's own order, RPC devices first:
// engine::Placement::workers_first). The output head goes with the last device on the path, so on
// a GPU head it stays on the head and logits never cross the link. Per token, a device spends
// (weight bytes its layers read) / (its bandwidth), and every cable crossing costs `hop_seconds`
// (the activations go head -> worker 1 -> ... -> last worker -> head). Among plans with the same
// time the one whose fullest device is least full wins, so equal boxes get balanced ranges. The
// search is exhaustive over contiguous splits (dynamic programming), so the result is optimal for
// this cost model and deterministic: the same inputs give the same plan.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "plan/cluster.h"
#include "plan/draft.h"
#include "plan/memory_model.h"
#include "plan/model_info.h"

namespace tandem::plan {

// How the nodes share the model: each runs a range of layers in turn, or all run every layer with
// the FFNs split across their devices (plan/ffn_split.h).
enum class Parallelism { layer, ffn_tensor };
const char* parallelism_name(Parallelism p);  // "layer", "ffn-tensor"

struct PlanOptions {
  MemoryOptions memory;
  double hop_seconds = 0.0005;  // per cable crossing per generated token
  Parallelism parallelism = Parallelism::layer;
  // ffn-tensor: one swap of the partial sums between the devices (once per layer and for the
  // output head, per generated token).
  double exchange_seconds = 0.0002;
  // A hand-made split ([model] layers): one share per node, head first; the solver then only
  // checks it and sizes each device. Empty: the solver chooses.
  std::vector<config::LayerShare> layers;
  // Speculative decoding: a draft model is held on the head's first device before the model's
  // layers are placed (plan/draft.h).
  SpeculativeOptions speculative;
};

// One device's share. Bytes are what the model predicts libllama allocates there.
struct DeviceAssignment {
  std::string node, device;
  DeviceKind kind = DeviceKind::gpu;
  std::string hardware;  // "cpu" or "gpu": what the device is (a worker's CPU has kind gpu)
  bool head = false;     // on the head node
  bool host = false;     // the head's CPU/host memory: also holds the token embedding
  int first_layer = 0, n_layers = 0;
  bool output = false;          // holds the output head
  bool embedding_copy = false;  // a worker's device running layer 0: a copy of the token embedding
  uint64_t weights = 0, kv = 0, compute = 0;
  uint64_t draft = 0;  // the draft model, on the head's first device (Plan::draft has its parts)
  uint64_t free_bytes = 0, margin = 0;
  bool unified_memory = false;     // a GPU sharing its node's system memory (DeviceSpec::unified_memory)
  HostReserve reserve;             // held back beside the margin (unified memory only)
  double bandwidth = 0;            // bytes per second
  bool bandwidth_assumed = false;  // not given: kDefaultBandwidth
  double seconds_per_token = 0;    // weight reads of its layers (and output head) per token
  uint64_t need() const { return weights + kv + compute + draft; }
  // Free memory left after the model, the margin and the reserve; negative when it does not fit.
  int64_t headroom() const {
    return static_cast<int64_t>(free_bytes) - static_cast<int64_t>(margin) - static_cast<int64_t>(reserve.total()) -
           static_cast<int64_t>(need());
  }
};

// What libllama needs (mirrors engine::Placement): the head's CPU layers, then one layer count
// per offload device, in order: the head's GPUs (when `use_local_gpus`) then the devices of each
// worker listed in `rpc_nodes`, or, when `workers_first`, the workers' devices then the head's GPUs.
struct LlamaSplit {
  int cpu_layers = 0;
  bool use_local_gpus = false;
  bool workers_first = false;
  std::vector<int> device_layers;
  std::vector<std::string> rpc_nodes;  // worker names, in device order; the caller maps them to endpoints
  // A worker that runs layer 0 holds a copy of the token embedding (engine::Placement::
  // embedding_on_worker). The plan counts it there, and goes without it only when that is what fits.
  bool embedding_on_worker = true;
};

// The layers each node runs under `split`: {first layer, count} by node name (nodes[0] is the
// head); nodes without layers are absent. A worker gets one count per device of its NodeSpec.
std::map<std::string, std::pair<int, int>> layer_ranges(const LlamaSplit& split, const std::vector<NodeSpec>& nodes);

// One way of sharing the model, priced: what `tandem plan` shows for each.
struct ParallelismEstimate {
  Parallelism parallelism = Parallelism::layer;
  bool fits = false;
  double tokens_per_second = 0;  // the bandwidth bound with the link's costs, when it fits
  std::string failure;           // when it does not
};

struct Plan {
  bool fits = false;
  Parallelism parallelism = Parallelism::layer;
  std::vector<DeviceAssignment> devices;  // every device of every node, head first; unused ones have 0 layers
  LlamaSplit split;
  // The head's CPU holds no layer, so llama.cpp runs the split pipeline-parallel (more compute
  // buffer per device; see memory_model.h).
  bool pipeline = false;
  double seconds_per_token = 0;  // device time + link time
  double link_seconds = 0;
  double tokens_per_second() const { return seconds_per_token > 0 ? 1.0 / seconds_per_token : 0; }
  // When !fits: what does not fit, where and by how much (one sentence), and what would fit.
  std::string failure;
  std::vector<std::string> suggestions;
  int exchanges_per_token = 0;  // ffn-tensor: swaps of partial sums per generated token
  // Every parallelism priced for the same request (make_plan fills it), this plan's among them.
  std::vector<ParallelismEstimate> estimates;
  DraftCost draft;  // what the draft holds on the head's first device (zero without one)
};

// Places `info` over `nodes` (head first). Returns a Plan with fits = false and an explanation when
// no placement fits; an error only for invalid input (bad options, a malformed node list, a hand
// split that does not cover the model, or whose ranges are not the order the devices run in).
Result<Plan> solve(const ModelInfo& info, const std::vector<NodeSpec>& nodes, const PlanOptions& options);

// The most bytes the head's first device can hold beside the model under some placement that
// fits (the split given by hand, when the options give one), to 1 MiB: the largest draft that
// fits, whatever the options' own draft. 0 when the model alone does not fit; errors as solve().
Result<uint64_t> draft_room(const ModelInfo& info, const std::vector<NodeSpec>& nodes, const PlanOptions& options);

// solve(), and when it does not fit, the alternatives that would: the largest context that fits,
// fewer parallel sequences, a smaller KV type, one more node like the largest, the other
// parallelism; with a draft that does not fit beside the model, what room the head has for one
// (`failure`), the draft at a smaller quantisation and ngram drafting instead. Fills `estimates` with every parallelism's figures.
Result<Plan> make_plan(const ModelInfo& info, const std::vector<NodeSpec>& nodes, const PlanOptions& options);

}  // namespace tandem::plan
