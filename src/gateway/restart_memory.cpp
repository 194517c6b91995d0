#include "gateway/restart_memory.h"

#include <algorithm>

#include "cluster/devices.h"
#include "cluster/live_nodes.h"
#include "common/units.h"
#include "link/control.h"
#include "link/worker_status.h"

namespace tandem::gateway {
namespace {

bool wanted(const std::vector<MemoryNeed>& needs, const std::string& node) {
  return std::any_of(needs.begin(), needs.end(), [&](const MemoryNeed& n) { return n.node == node; });
}

}  // namespace

std::vector<MemoryNeed> memory_needs(const plan::Plan& plan) {
  std::vector<MemoryNeed> out;
  for (const plan::DeviceAssignment& d : plan.devices) {
    if (d.n_layers == 0 && !d.host && !d.output) continue;
    const uint64_t spare = d.headroom() > 0 ? static_cast<uint64_t>(d.headroom()) : 0;
    out.push_back({d.node, d.device, d.free_bytes > spare ? d.free_bytes - spare : 0});
  }
  return out;
}

std::string check_memory(const std::vector<MemoryNeed>& needs, const std::vector<NodeMemory>& now) {
  std::string out;
  for (const MemoryNeed& need : needs) {
    const auto node = std::find_if(now.begin(), now.end(), [&](const NodeMemory& n) { return n.node == need.node; });
    if (node == now.end() || !node->error.empty()) continue;
    const auto dev = std::find_if(node->devices.begin(), node->devices.end(),
                                  [&](const plan::DeviceSpec& d) { return d.name == need.device; });
    if (dev == node->devices.end() || dev->free_bytes >= need.bytes) continue;
    std::string line = need.node + "/" + need.device + " ";
    if (dev->free_bytes == 0) {
      line += "reports 0 bytes free (its driver could not be asked for its memory)";
    } else {
      line += "has " + format_bytes(dev->free_bytes) + " free, the plan needs " + format_bytes(need.bytes) +
              " there: short by " + format_bytes(need.bytes - dev->free_bytes);
    }
    if (!node->holders.empty()) line += "; holding the most memory on " + need.node + ": " + node->holders;
    if (dev->hardware == "gpu" && !dev->unified_memory) {
      line += " (a GPU's own memory does not show there: nvidia-smi lists the processes that hold it)";
    }
    out += (out.empty() ? "" : "; ") + line;
  }
  return out;
}

std::vector<NodeMemory> memory_now(const config::Config& config, const link::Secret* secret,
                                   const std::vector<MemoryNeed>& needs) {
  // What the devices report, not what the file lets the model use: the caps are limits, not free memory.
  config::Config c = config;
  c.cluster.head_memory.reset();
  for (auto& w : c.workers) w.memory.reset();
  std::vector<NodeMemory> out;
  if (wanted(needs, c.cluster.head_name)) {
    NodeMemory head;
    head.node = c.cluster.head_name;
    head.devices = cluster::head_node(c).devices;
    head.holders = cluster::format_holders(cluster::memory_holders(3));
    out.push_back(std::move(head));
  }
  for (const config::WorkerConfig& w : c.workers) {
    if (!wanted(needs, w.name)) continue;
    NodeMemory node;
    node.node = w.name;
    auto ep = link::parse_endpoint(w.address);
    if (!ep.is_ok() || secret == nullptr) {
      node.error = ep.is_ok() ? "no secret" : ep.status().message();
      out.push_back(std::move(node));
      continue;
    }
    link::HandshakeOptions ho = link::default_handshake_options();
    ho.name = c.cluster.head_name;
    auto st = link::control_request(ep.value(), *secret, "status", ho);
    if (!st.is_ok()) {
      node.error = st.status().message();
      out.push_back(std::move(node));
      continue;
    }
    node.devices = cluster::node_from_status(w, st.value()).devices;
    std::vector<cluster::MemoryHolder> holders;
    for (const link::WorkerMemoryHolder& h : link::worker_status_from(st.value()).memory_holders)
      holders.push_back({h.pid, h.name.empty() ? std::string("?") : h.name, h.bytes});
    node.holders = cluster::format_holders(holders);
    out.push_back(std::move(node));
  }
  return out;
}

}  // namespace tandem::gateway
