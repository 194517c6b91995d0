#include "cluster/live_nodes.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "cluster/devices.h"
#include "common/log.h"
#include "link/control.h"

namespace tandem::cluster {
namespace {

// A declared memory is a cap on what the node reports (never more than the file allows, less when
// less is free).
void cap_memory(std::optional<uint64_t> cap, plan::NodeSpec* node);

}  // namespace

namespace {

void cap_memory(std::optional<uint64_t> cap, plan::NodeSpec* node) {
  if (!cap) return;
  uint64_t total = 0;
  for (const auto& d : node->devices) total += d.free_bytes;
  if (total <= *cap) return;
  // Shared out in proportion to what each device reports, so a node of several devices keeps its
  // balance.
  uint64_t left = *cap;
  for (size_t i = 0; i < node->devices.size(); ++i) {
    auto& d = node->devices[i];
    const uint64_t share = i + 1 == node->devices.size()
                               ? left
                               : static_cast<uint64_t>(static_cast<long double>(d.free_bytes) * *cap / total);
    d.free_bytes = std::min(share, left);
    left -= d.free_bytes;
  }
}

}  // namespace

plan::NodeSpec node_from_status(const config::WorkerConfig& w, const nlohmann::json& status) {
  plan::NodeSpec n;
  n.name = w.name;
  n.address = w.address;
  std::vector<plan::DeviceSpec> gpus, cpus;
  for (const auto& d : status.value("devices", nlohmann::json::array())) {
    plan::DeviceSpec s;
    s.name = d.value("name", "?");
    const std::string type = d.value("type", "cpu");
    s.kind = type == "cpu" ? plan::DeviceKind::cpu : plan::DeviceKind::gpu;
    s.hardware = type == "cpu" ? "cpu" : "gpu";
    s.free_bytes = d.value("free_bytes", uint64_t{0});
    s.reported = true;
    // A worker of an earlier build says only its type; ggml's "igpu" is an integrated GPU.
    const bool shares = d.value("shares_host_memory", type == "igpu");
    s.unified_memory = type != "cpu" && (shares || w.unified_memory);
    s.bandwidth = w.bandwidth.value_or(plan::kDefaultBandwidth);
    s.bandwidth_assumed = !w.bandwidth.has_value();
    (s.kind == plan::DeviceKind::cpu ? cpus : gpus).push_back(s);
  }
  n.devices = gpus.empty() ? cpus : gpus;
  // Whatever it is, a worker's device is an offload device (an RPC device) for the head.
  for (auto& d : n.devices) d.kind = plan::DeviceKind::gpu;
  cap_memory(w.memory, &n);
  return n;
}

plan::NodeSpec head_node(const config::Config& c) {
  plan::NodeSpec head;
  head.name = c.cluster.head_name;
  const auto devices = local_devices();
  bool has_gpu = false;
  for (const auto& d : devices) has_gpu |= d.type != "cpu";
  const bool use_cpu = !has_gpu || c.cluster.head_device == "cpu";
  for (const auto& d : devices) {
    if ((d.type == "cpu") != use_cpu) continue;
    plan::DeviceSpec s;
    s.name = d.name;
    s.kind = use_cpu ? plan::DeviceKind::cpu : plan::DeviceKind::gpu;
    s.hardware = use_cpu ? "cpu" : "gpu";
    s.free_bytes = d.free_bytes;
    s.reported = true;
    s.unified_memory = !use_cpu && (d.shares_host_memory || c.cluster.head_device == "unified");
    s.bandwidth = c.cluster.head_bandwidth.value_or(plan::kDefaultBandwidth);
    s.bandwidth_assumed = !c.cluster.head_bandwidth.has_value();
    head.devices.push_back(s);
  }
  cap_memory(c.cluster.head_memory, &head);
  return head;
}

Result<std::vector<plan::NodeSpec>> query_workers(const config::Config& c, const link::Secret& secret,
                                                  const std::atomic<bool>* wait_until,
                                                  const WorkerAttempt& on_attempt) {
  std::vector<plan::NodeSpec> nodes;
  for (const auto& w : c.workers) {
    auto ep = link::parse_endpoint(w.address);
    if (!ep.is_ok()) return ep.status().with_context("worker " + w.name);
    link::HandshakeOptions ho = link::default_handshake_options();
    ho.name = c.cluster.head_name;
    auto last_log = std::chrono::steady_clock::now() - std::chrono::hours(1);
    for (;;) {
      if (wait_until != nullptr && *wait_until) return Status::cancelled("stopped while waiting for worker " + w.name);
      auto st = link::control_request(ep.value(), secret, "status", ho);
      if (on_attempt) on_attempt(w.name, st.status());
      if (st.is_ok()) {
        nodes.push_back(node_from_status(w, st.value()));
        log::info("serve", "worker " + w.name + " (" + w.address + "): " + std::to_string(nodes.back().devices.size()) +
                               " device(s)");
        break;
      }
      // A refused secret or a version mismatch will not heal by waiting.
      if (wait_until == nullptr || st.status().code() == StatusCode::invalid_argument) {
        return st.status().with_context("asking worker '" + w.name + "' for its devices");
      }
      if (std::chrono::steady_clock::now() - last_log > std::chrono::seconds(10)) {
        log::info("serve", "waiting for worker " + w.name + ": " + st.status().message());
        last_log = std::chrono::steady_clock::now();
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  return nodes;
}

Result<std::vector<plan::NodeSpec>> live_nodes(const config::Config& c) {
  std::vector<plan::NodeSpec> nodes{head_node(c)};
  if (c.workers.empty()) return nodes;
  if (c.cluster.secret_file.empty()) return Status::invalid_argument("workers need [cluster] secret_file");
  auto secret = link::load_secret(c.cluster.secret_file);
  if (!secret.is_ok()) return secret.status();
  auto w = query_workers(c, secret.value(), nullptr);
  if (!w.is_ok()) return w.status();
  nodes.insert(nodes.end(), w->begin(), w->end());
  return nodes;
}

}  // namespace tandem::cluster
