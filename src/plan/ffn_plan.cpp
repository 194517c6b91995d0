// The plan of the FFN tensor split: every device that runs layers holds its part of each FFN and of
// the output head, the rest of the weights whole, and the whole KV cache.
#include "plan/ffn_plan.h"

#include <algorithm>

#include "common/units.h"
#include "plan/ffn_split.h"

namespace tandem::plan {

Plan solve_ffn_tensor(const ModelInfo& info, const ModelCosts& c, const std::vector<NodeSpec>& nodes,
                      const PlanOptions& o, uint64_t draft) {
  Plan plan;
  plan.parallelism = Parallelism::ffn_tensor;
  const bool gpu_head = nodes[0].devices[0].kind == DeviceKind::gpu;
  const int n_layer = static_cast<int>(c.layers.size());
  // The devices that run layers: every worker's, and the head's when it has GPUs (a CPU head only
  // embeds the tokens and samples, as in llama.cpp's own tensor split).
  size_t runners = 0;
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (n > 0 || gpu_head) runners += nodes[n].devices.size();
  }
  Result<FfnSplit> split =
      runners >= 2 ? FfnSplit::make(info, runners)
                   : Result<FfnSplit>(Status::invalid_argument(
                         "the FFN tensor split needs two or more devices that run layers (" + std::to_string(runners) +
                         " here: " + (gpu_head ? "the head's GPU" : "a CPU head runs none") + ")"));
  if (const std::string refusal = tensor_split_parallel_refusal(info, o.memory.parallel); !refusal.empty()) {
    split = Status::invalid_argument(refusal);
  }
  uint64_t kv = 0;
  for (const LayerCost& l : c.layers) kv += l.kv;
  const uint64_t compute = compute_bytes(c, 0, n_layer, true, false, false) + c.input_slots;
  size_t k = 0;
  std::string short_of;
  double slowest = 0;
  for (size_t n = 0; n < nodes.size(); ++n) {
    for (size_t i = 0; i < nodes[n].devices.size(); ++i) {
      const DeviceSpec& spec = nodes[n].devices[i];
      DeviceAssignment d;
      d.node = nodes[n].name;
      d.device = spec.name;
      d.kind = spec.kind;
      d.hardware = spec.hardware.empty() ? device_kind_name(spec.kind) : spec.hardware;
      d.head = n == 0;
      d.host = n == 0 && i == 0;
      d.free_bytes = spec.free_bytes;
      d.margin = margin_bytes(o.memory, spec.free_bytes);
      d.unified_memory = spec.unified_memory;
      d.reserve = host_reserve(o.memory, nodes[n], i);
      d.bandwidth = spec.bandwidth;
      d.bandwidth_assumed = spec.bandwidth_assumed;
      if (d.host) {
        d.draft = draft;
        d.weights += c.input_weights;
        d.compute += c.host_output + (gpu_head ? 0 : c.compute_host);
      }
      if ((n > 0 || gpu_head) && split.is_ok()) {
        // The embedding stays with the head's host; every runner holds the rest of the mirrored part.
        d.weights += split->device_weight_bytes(k) - std::min(split->device_weight_bytes(k), c.input_weights);
        d.kv = kv;
        d.compute += compute;
        d.first_layer = 0;
        d.n_layers = n_layer;
        d.output = true;
        d.seconds_per_token = static_cast<double>(split->device_read_bytes(k)) / d.bandwidth;
        slowest = std::max(slowest, d.seconds_per_token);
        ++k;
      }
      if (d.headroom() < 0 && short_of.empty()) {
        const uint64_t held = d.margin + d.reserve.total();
        const uint64_t usable = d.free_bytes > held ? d.free_bytes - held : 0;
        short_of = d.node + " needs " + format_bytes(d.need()) + " for its part of every layer (weights " +
                   format_bytes(d.weights) + ", KV " + format_bytes(d.kv) + ", compute " + format_bytes(d.compute) +
                   (d.draft > 0 ? ", draft model " + format_bytes(d.draft) : "") + ") but has " + format_bytes(usable) +
                   " after the " + format_bytes(d.margin) + " margin" +
                   (d.reserve.total() > 0 ? " and " + format_bytes(d.reserve.total()) + " held for its prompt cache, " +
                                                "the OS and load transients (unified memory)"
                                          : "") +
                   ": short by " + format_bytes(d.need() - usable);
      }
      plan.devices.push_back(d);
    }
  }
  if (!split.is_ok()) {
    plan.failure = split.status().message();
    return plan;
  }
  if (!short_of.empty()) {
    plan.failure = "under the FFN tensor split, " + short_of;
    return plan;
  }
  plan.fits = true;
  plan.split.use_local_gpus = gpu_head;
  plan.split.embedding_on_worker = false;
  for (size_t n = 1; n < nodes.size(); ++n) plan.split.rpc_nodes.push_back(nodes[n].name);
  plan.exchanges_per_token = n_layer + 1;
  plan.link_seconds = o.exchange_seconds * plan.exchanges_per_token;
  plan.seconds_per_token = slowest + plan.link_seconds;
  return plan;
}

}  // namespace tandem::plan
