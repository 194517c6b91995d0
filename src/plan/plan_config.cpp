#include "plan/plan_config.h"

#include <algorithm>

namespace tandem::plan {
namespace {

// [model] speculative, draft_max and draft_model: the draft's file is read here, so that every
// command that plans from a config (plan -c, serve, doctor, worker seed -c) counts the same draft.
Status speculative_from_config(const config::Config& c, PlanOptions* o) {
  const std::string source = c.path.empty() ? "config" : c.path;
  auto mode = parse_speculative(c.model.speculative);
  if (!mode.is_ok()) return mode.status().with_context(source + ": [model] speculative");
  o->speculative.mode = mode.value();
  o->speculative.draft_max = static_cast<uint32_t>(std::max(1, c.model.draft_max));
  if (mode.value() == Speculative::off) return Status::ok();
  // The model checks every drafted token in one batch: a row of logits each, beside the usual one.
  o->memory.outputs_per_sequence = 1 + o->speculative.draft_max;
  if (mode.value() != Speculative::draft) return Status::ok();
  if (c.model.draft_model.empty()) {
    return Status::invalid_argument(source +
                                    ": [model] speculative = \"draft\" needs draft_model (--draft-model): the "
                                    "draft's GGUF");
  }
  auto draft = read_draft_model(c.model.draft_model);
  if (!draft.is_ok()) return draft.status();
  o->speculative.draft = draft.value();
  return Status::ok();
}

}  // namespace

Result<PlanOptions> plan_options_from_config(const config::Config& c) {
  PlanOptions o;
  o.memory.context = c.model.context;
  o.memory.parallel = c.model.parallel;
  auto kv = parse_kv_type(c.model.kv_type);
  if (!kv.is_ok()) return kv.status().with_context((c.path.empty() ? "config" : c.path) + ": [model] kv_type");
  o.memory.kv_type = kv.value();
  o.memory.margin_fraction = c.plan.margin;
  o.memory.margin_bytes = c.plan.margin_bytes;
  o.memory.prompt_cache = c.model.prompt_cache;
  o.memory.os_reserve = c.plan.os_reserve;
  o.memory.load_reserve = c.plan.load_reserve;
  o.hop_seconds = c.plan.hop_ms / 1e3;
  o.exchange_seconds = c.plan.exchange_ms / 1e3;
  o.parallelism = c.model.parallelism == "ffn-tensor" ? Parallelism::ffn_tensor : Parallelism::layer;
  o.layers = c.model.layers;
  TANDEM_RETURN_IF_ERROR(speculative_from_config(c, &o));
  return o;
}

Result<std::vector<NodeSpec>> declared_nodes(const config::Config& c) {
  const std::string source = c.path.empty() ? "the config" : c.path;
  if (!c.cluster.head_memory) {
    return Status::invalid_argument(
        source + ": [cluster] head_memory is not set; planning from declared figures needs every node's memory");
  }
  NodeSpec head;
  head.name = c.cluster.head_name;
  DeviceSpec dev;
  dev.name = c.cluster.head_device == "cpu" ? "CPU" : "GPU";
  dev.kind = c.cluster.head_device == "cpu" ? DeviceKind::cpu : DeviceKind::gpu;
  dev.hardware = c.cluster.head_device == "cpu" ? "cpu" : "gpu";
  dev.unified_memory = c.cluster.head_device == "unified";
  dev.free_bytes = *c.cluster.head_memory;
  dev.bandwidth = c.cluster.head_bandwidth.value_or(kDefaultBandwidth);
  dev.bandwidth_assumed = !c.cluster.head_bandwidth.has_value();
  head.devices.push_back(dev);
  std::vector<NodeSpec> nodes{head};
  for (const config::WorkerConfig& w : c.workers) {
    if (!w.memory) {
      return Status::invalid_argument(source + ":" + std::to_string(w.line) + ": [[worker]] '" + w.name +
                                      "' has no memory; planning from declared figures needs every node's memory");
    }
    NodeSpec n;
    n.name = w.name;
    n.address = w.address;
    DeviceSpec d;
    d.name = "GPU";
    d.unified_memory = w.unified_memory;
    d.free_bytes = *w.memory;
    d.bandwidth = w.bandwidth.value_or(kDefaultBandwidth);
    d.bandwidth_assumed = !w.bandwidth.has_value();
    n.devices.push_back(d);
    nodes.push_back(n);
  }
  return nodes;
}

Result<std::optional<std::pair<int, int>>> declared_layer_range(const config::Config& c, const ModelInfo& info,
                                                                const std::string& name) {
  auto nodes = declared_nodes(c);
  if (!nodes.is_ok()) return nodes.status();
  auto options = plan_options_from_config(c);
  if (!options.is_ok()) return options.status();
  auto p = make_plan(info, nodes.value(), options.value());
  if (!p.is_ok()) return p.status();
  if (!p->fits) return Status::resource_exhausted("the declared plan does not fit: " + p->failure);
  const auto ranges = layer_ranges(p->split, nodes.value());
  const auto it = ranges.find(name);
  if (it == ranges.end()) return std::optional<std::pair<int, int>>();
  return std::optional<std::pair<int, int>>(std::pair{it->second.first, it->second.first + it->second.second - 1});
}

}  // namespace tandem::plan
