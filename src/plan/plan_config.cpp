#include "plan/plan_config.h"

namespace tandem::plan {

Result<PlanOptions> plan_options_from_config(const config::Config& c) {
  PlanOptions o;
  o.memory.context = c.model.context;
  o.memory.parallel = c.model.parallel;
  auto kv = parse_kv_type(c.model.kv_type);
  if (!kv.is_ok()) return kv.status().with_context((c.path.empty() ? "config" : c.path) + ": [model] kv_type");
  o.memory.kv_type = kv.value();
  o.memory.margin_fraction = c.plan.margin;
  o.memory.margin_bytes = c.plan.margin_bytes;
  o.hop_seconds = c.plan.hop_ms / 1e3;
  return o;
}

std::unique_ptr<NodeSource> node_source_from_config(const config::Config& c) {
  NodeSpec head;
  head.name = c.cluster.head_name;
  DeviceSpec dev;
  dev.name = c.cluster.head_device == "cpu" ? "CPU" : "GPU";
  dev.kind = c.cluster.head_device == "cpu" ? DeviceKind::cpu : DeviceKind::gpu;
  dev.free_bytes = c.cluster.head_memory.value_or(0);
  dev.bandwidth = c.cluster.head_bandwidth.value_or(kDefaultBandwidth);
  dev.bandwidth_assumed = !c.cluster.head_bandwidth.has_value();
  head.devices.push_back(dev);
  bool all_declared = c.cluster.head_memory.has_value();
  std::vector<NodeSpec> workers;
  for (const config::WorkerConfig& w : c.workers) {
    NodeSpec n;
    n.name = w.name;
    n.address = w.address;
    DeviceSpec d;
    d.name = "GPU";
    d.free_bytes = w.memory.value_or(0);
    d.bandwidth = w.bandwidth.value_or(kDefaultBandwidth);
    d.bandwidth_assumed = !w.bandwidth.has_value();
    n.devices.push_back(d);
    all_declared = all_declared && w.memory.has_value();
    workers.push_back(n);
  }
  if (!all_declared) return std::make_unique<LiveNodeSource>(head, workers);
  std::vector<NodeSpec> nodes{head};
  nodes.insert(nodes.end(), workers.begin(), workers.end());
  return std::make_unique<StaticNodeSource>(nodes);
}

}  // namespace tandem::plan
