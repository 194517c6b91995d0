#include "plan/cluster.h"

#include <cctype>
#include <set>

#include "common/units.h"

namespace tandem::plan {

const char* device_kind_name(DeviceKind kind) { return kind == DeviceKind::cpu ? "cpu" : "gpu"; }

Result<double> parse_bandwidth(const std::string& text) {
  std::string t = text;
  std::string lower;
  for (char c : t) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.size() > 2 && lower.compare(lower.size() - 2, 2, "/s") == 0) t = t.substr(0, t.size() - 2);
  auto bytes = parse_bytes(t, /*require_unit=*/true);
  if (!bytes.is_ok() || bytes.value() == 0) {
    return Status::invalid_argument("'" + text + "' is not a bandwidth (expected e.g. 273GB/s, 1.2TB/s)");
  }
  return static_cast<double>(bytes.value());
}

Result<NodeSpec> parse_node_flag(const std::string& text, DeviceKind kind) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    return Status::invalid_argument("node '" + text + "': expected NAME=MEM[@BW], e.g. box-a=128GiB@273GB/s");
  }
  NodeSpec node;
  node.name = text.substr(0, eq);
  std::string rest = text.substr(eq + 1);
  DeviceSpec dev;
  dev.name = node.name;
  dev.kind = kind;
  const size_t at = rest.find('@');
  if (at != std::string::npos) {
    auto bw = parse_bandwidth(rest.substr(at + 1));
    if (!bw.is_ok()) return bw.status().with_context("node '" + node.name + "'");
    dev.bandwidth = bw.value();
    rest = rest.substr(0, at);
  } else {
    dev.bandwidth_assumed = true;
  }
  auto mem = parse_bytes(rest, /*require_unit=*/true);
  if (!mem.is_ok()) return mem.status().with_context("node '" + node.name + "' memory");
  dev.free_bytes = mem.value();
  node.devices.push_back(dev);
  return node;
}

Status validate_nodes(const std::vector<NodeSpec>& nodes) {
  if (nodes.empty()) return Status::invalid_argument("no nodes: give at least the head");
  std::set<std::string> names;
  int offload = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeSpec& n = nodes[i];
    if (n.name.empty()) return Status::invalid_argument("node " + std::to_string(i + 1) + " has no name");
    if (!names.insert(n.name).second) return Status::invalid_argument("node name '" + n.name + "' is used twice");
    if (n.devices.empty()) return Status::invalid_argument("node '" + n.name + "' has no device");
    for (const DeviceSpec& d : n.devices) {
      if (!(d.bandwidth > 0)) return Status::invalid_argument("node '" + n.name + "': bandwidth must be positive");
      if (d.reported && d.free_bytes == 0) {
        return Status::unavailable(
            "device " + d.name + " on " + n.name +
            " reports 0 bytes free: its driver could not be asked for its memory (ggml reports 0/0 when "
            "cudaMemGetInfo fails, as seen on GB10), and tandem does not plan on a guess; check the GPU "
            "(nvidia-smi, dmesg), restart its driver or the box, or leave the device out ([[worker]] devices)");
      }
      if (i > 0 || d.kind == DeviceKind::gpu) ++offload;
    }
  }
  if (nodes.size() - 1 > static_cast<size_t>(kMaxRpcServers)) {
    return Status::invalid_argument(std::to_string(nodes.size() - 1) +
                                    " workers: llama.cpp's RPC client reaches at most " +
                                    std::to_string(kMaxRpcServers));
  }
  if (offload > kMaxOffloadDevices) {
    return Status::invalid_argument(std::to_string(offload) + " offload devices: libllama splits over at most " +
                                    std::to_string(kMaxOffloadDevices));
  }
  return Status::ok();
}

}  // namespace tandem::plan
