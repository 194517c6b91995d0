#include "plan/solver.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>

#include "common/units.h"
#include "plan/ffn_plan.h"

namespace tandem::plan {
namespace {

constexpr int64_t kInfeasible = std::numeric_limits<int64_t>::max();

// One device in solver order, with what it would hold whatever its layer range.
struct FlatDevice {
  int node = 0, index = 0;  // which node, and which of its devices
  const DeviceSpec* spec = nullptr;
  bool host = false;    // the head's first device: pays for the token embedding and host buffers
  uint64_t usable = 0;  // free bytes after the margin and the reserve
  uint64_t margin = 0;
  uint64_t draft = 0;                // the head's first device: the draft model (DraftCost::total)
  HostReserve reserve;               // a unified-memory node's (on its first such device)
  std::vector<int64_t> time_prefix;  // picoseconds to read layers [0, l) at this device's bandwidth
};

// Cost of a partial plan, compared lexicographically: time per token first, then how full the
// fullest device is (so that equal devices get balanced ranges).
struct Cost {
  int64_t time_ps = kInfeasible;
  int64_t util_ppm = 0;
  bool feasible() const { return time_ps != kInfeasible; }
  bool operator<(const Cost& o) const {
    if (time_ps != o.time_ps) return time_ps < o.time_ps;
    return util_ppm < o.util_ppm;
  }
};

// A head whose first device is a GPU (or a unified-memory box) still has the CPU's compute buffer
// in the same memory, next to the GPU's own. A worker's device with sparse layers also holds the
// repeated-input slots; every device that reads a step's inputs other than the head's CPU (one
// holding layers or the output head) holds the head's input slots.
// `rows_elsewhere`: for the head's first device, a worker gathers the embedding rows; for a
// worker's, it gathers them itself (ModelCosts::embedding_rows).
uint64_t device_compute(const ModelCosts& c, const FlatDevice& f, int first, int count, bool output, bool pipeline,
                        bool rows_elsewhere) {
  const bool head = f.node == 0, host = f.host, gpu = f.spec->kind == DeviceKind::gpu;
  const uint64_t slots = (count > 0 || output) && !(host && !gpu) ? c.input_slots : 0;
  const uint64_t host_rows = host && rows_elsewhere ? 2 * c.embedding_rows : 0;
  if (host && gpu) return compute_bytes(c, first, count, output, false, pipeline) + c.compute_host - host_rows + slots;
  const bool sparse = count > 0 && c.sparse_before[first + count] > c.sparse_before[first];
  uint64_t bytes =
      compute_bytes(c, first, count, output, host, pipeline) + (!head && sparse ? c.worker_reuse_slots : 0) + slots;
  if (host && count == 0) bytes -= host_rows;  // within compute_host, which such a host's bytes include
  if (!head && rows_elsewhere && pipeline) bytes -= std::min(4 * c.embedding_rows, bytes);
  return bytes;
}

// A worker's device that runs layer 0 also holds a copy of the token embedding and gathers each
// batch's rows (datapath/worker_embedding.h); the head keeps its own mapping of it.
bool gathers_embedding(const FlatDevice& f, int first, int count, bool on) {
  return on && f.node != 0 && first == 0 && count > 0;
}

int64_t picoseconds(uint64_t bytes, double bandwidth) {
  return static_cast<int64_t>(std::floor(static_cast<double>(bytes) * 1e12 / bandwidth));
}

struct Prefix {
  std::vector<uint64_t> weights, kv;  // [0, l)
};

class Solver {
 public:
  // `draft`: bytes the head's first device holds for the draft model before any layer.
  Solver(const ModelCosts& costs, const std::vector<NodeSpec>& nodes, const PlanOptions& o, bool table_on_worker,
         uint64_t draft)
      : costs_(costs), n_layer_(static_cast<int>(costs.layers.size())), table_on_worker_(table_on_worker) {
    prefix_.weights.assign(n_layer_ + 1, 0);
    prefix_.kv.assign(n_layer_ + 1, 0);
    for (int l = 0; l < n_layer_; ++l) {
      prefix_.weights[l + 1] = prefix_.weights[l] + costs.layers[l].weights;
      prefix_.kv[l + 1] = prefix_.kv[l] + costs.layers[l].kv;
    }
    // A GPU head puts its GPUs after the workers' devices (engine::Placement::workers_first).
    workers_first_ = nodes[0].devices[0].kind == DeviceKind::gpu && nodes.size() > 1;
    head_devices_ = nodes[0].devices.size();
    std::vector<size_t> node_order;
    for (size_t n = workers_first_ ? 1 : 0; n < nodes.size(); ++n) node_order.push_back(n);
    if (workers_first_) node_order.push_back(0);
    for (const size_t n : node_order) {
      for (size_t d = 0; d < nodes[n].devices.size(); ++d) {
        FlatDevice f;
        f.node = static_cast<int>(n);
        f.index = static_cast<int>(d);
        f.spec = &nodes[n].devices[d];
        f.host = n == 0 && d == 0;
        f.draft = f.host ? draft : 0;
        f.margin = margin_bytes(o.memory, f.spec->free_bytes);
        f.reserve = host_reserve(o.memory, nodes[n], d);
        const uint64_t held = f.margin + f.reserve.total();
        f.usable = f.spec->free_bytes > held ? f.spec->free_bytes - held : 0;
        f.time_prefix.assign(n_layer_ + 1, 0);
        for (int l = 0; l < n_layer_; ++l) {
          f.time_prefix[l + 1] = f.time_prefix[l] + picoseconds(costs.layers[l].read_per_token, f.spec->bandwidth);
        }
        flat_.push_back(std::move(f));
      }
    }
    hop_ps_ = static_cast<int64_t>(std::llround(o.hop_seconds * 1e12));
  }

  bool workers_first() const { return workers_first_; }
  int64_t hop_ps() const { return hop_ps_; }
  const FlatDevice& host() const {
    return *std::find_if(flat_.begin(), flat_.end(), [](const FlatDevice& f) { return f.host; });
  }
  // The devices of a path whose last worker is node `last` (0: the head alone), in layer order;
  // the last one holds the output head.
  std::vector<int> path(int last) const {
    std::vector<int> seq;
    for (size_t j = 0; j < flat_.size(); ++j) {
      if (flat_[j].node <= last) seq.push_back(static_cast<int>(j));
    }
    return seq;
  }

  // Memory a device needs for layers [first, first+count); `output`: it holds the output head.
  uint64_t need(const FlatDevice& f, int first, int count, bool output, bool pipeline) const {
    uint64_t bytes =
        prefix_.weights[first + count] - prefix_.weights[first] + prefix_.kv[first + count] - prefix_.kv[first];
    if (f.host) bytes += costs_.input_weights + costs_.other_weights + costs_.host_output + f.draft;
    if (gathers_embedding(f, first, count, table_on_worker_)) bytes += costs_.input_weights;
    if (output) bytes += costs_.output_weights;
    return bytes + device_compute(costs_, f, first, count, output, pipeline, rows_elsewhere(f, first, count));
  }

  // Where the embedding rows are gathered differs from libllama's default for `f` holding layers
  // [first, first+count): it is the worker running layer 0, or the head's first device while a
  // worker runs layer 0 (a CPU head alone on its node holding none, or a GPU head after workers).
  bool rows_elsewhere(const FlatDevice& f, int first, int count) const {
    if (!table_on_worker_) return false;
    if (!f.host) return gathers_embedding(f, first, count, true);
    if (f.spec->kind == DeviceKind::cpu) return count == 0 && head_devices_ == 1;
    return workers_first_ && first > 0;
  }

  // `from` extended by device `f` holding layers [l, l+n); infeasible when they do not fit.
  Cost extend(const FlatDevice& f, const Cost& from, int l, int n, bool output, bool pays_hop, bool pipeline) const {
    const uint64_t bytes = need(f, l, n, output, pipeline);
    if (bytes > f.usable) return Cost{};
    Cost c;
    c.time_ps = from.time_ps + f.time_prefix[l + n] - f.time_prefix[l];
    if (output) c.time_ps += picoseconds(costs_.output_read, f.spec->bandwidth);
    if (pays_hop) c.time_ps += hop_ps_;
    const int64_t util =
        bytes == 0 ? 0 : static_cast<int64_t>(static_cast<double>(bytes) * 1e6 / static_cast<double>(f.usable));
    c.util_ppm = std::max(from.util_ppm, util);
    return c;
  }

  // Best plan whose last used node is `last`; fills `ranges` (layer count per flat device).
  // `pipeline`: plans where the head's CPU holds no layer, so llama.cpp runs pipeline-parallel;
  // otherwise a head CPU holds at least one layer. A GPU head is always pipeline-parallel. (With a
  // single offload device llama.cpp does not pipeline; counting it anyway errs on the safe side.)
  Cost solve_for_last(int last, bool pipeline, std::vector<int>* ranges) const;

  const std::vector<FlatDevice>& flat() const { return flat_; }

 private:
  const ModelCosts& costs_;
  const int n_layer_;
  const bool table_on_worker_;
  Prefix prefix_;
  std::vector<FlatDevice> flat_;
  int64_t hop_ps_ = 0;
  bool workers_first_ = false;
  size_t head_devices_ = 1;
};

Cost Solver::solve_for_last(int last, bool pipeline, std::vector<int>* ranges) const {
  const std::vector<int> seq = path(last);
  const int m = static_cast<int>(seq.size());
  const int L = n_layer_;
  // dp[j][l][u]: best cost with layers [0, l) on devices [0, j); u: the node of device j-1 already
  // holds a layer (a worker's first layer adds one cable crossing).
  const size_t stride = static_cast<size_t>(L + 1) * 2;
  std::vector<Cost> dp(static_cast<size_t>(m + 1) * stride);
  std::vector<int> choice(dp.size(), -1);
  auto at = [&](int j, int l, int u) -> size_t {
    return static_cast<size_t>(j) * stride + static_cast<size_t>(l) * 2 + u;
  };
  // The last worker is on the path (on a CPU head it holds the output head): the way into the
  // workers and the way back to the head cost a crossing each.
  dp[at(0, 0, 0)] = Cost{last > 0 ? 2 * hop_ps_ : 0, 0};
  for (int j = 0; j < m; ++j) {
    const FlatDevice& f = flat_[seq[j]];
    const bool new_node = j == 0 || flat_[seq[j - 1]].node != f.node;
    const bool is_output = j == m - 1;
    for (int l = 0; l <= L; ++l) {
      for (int u = 0; u < 2; ++u) {
        const Cost& from = dp[at(j, l, u)];
        if (!from.feasible()) continue;
        const int u_in = new_node ? 0 : u;
        const bool cpu_host = f.host && f.spec->kind == DeviceKind::cpu;
        for (int n = cpu_host && !pipeline ? 1 : 0; l + n <= L; ++n) {
          if (cpu_host && pipeline && n > 0) break;
          const bool pays_hop = f.node > 0 && f.node != last && n > 0 && u_in == 0;
          const Cost c = extend(f, from, l, n, is_output, pays_hop, pipeline);
          if (!c.feasible()) {
            if (n > 0) break;  // more layers only need more memory
            continue;
          }
          const size_t to = at(j + 1, l + n, (u_in || n > 0) ? 1 : 0);
          if (c < dp[to]) {
            dp[to] = c;
            choice[to] = n * 2 + u;  // layers taken and the state it came from
          }
        }
      }
    }
  }
  Cost best;
  int best_u = -1;
  for (int u = 0; u < 2; ++u) {
    if (dp[at(m, L, u)] < best) {
      best = dp[at(m, L, u)];
      best_u = u;
    }
  }
  if (!best.feasible()) return best;
  ranges->assign(flat_.size(), 0);
  int l = L, u = best_u;
  for (int j = m; j > 0; --j) {
    const int c = choice[at(j, l, u)];
    (*ranges)[seq[j - 1]] = c / 2;
    l -= c / 2;
    u = c % 2;
  }
  return best;
}

std::string gib(uint64_t bytes) { return format_bytes(bytes); }

// What a device holds back: "the 6.75 GiB margin", and on a unified-memory node "the 6.75 GiB
// margin and 10.0 GiB held for its prompt cache, the OS and load transients".
std::string held_back(const FlatDevice& f) {
  std::string t = "the " + gib(f.margin) + " margin";
  if (f.reserve.total() > 0) {
    t += " and " + gib(f.reserve.total()) + " held for its prompt cache, the OS and load transients (unified memory)";
  }
  return t;
}

// Why nothing fits, in one sentence: the head's fixed share, or the whole model against all the
// memory, or the packing of layers into contiguous ranges.
std::string explain_failure(const Solver& s, const ModelCosts& c, const std::vector<NodeSpec>& nodes,
                            const PlanOptions& o) {
  const FlatDevice& host = s.host();
  const uint64_t host_need = s.need(host, 0, 0, false, true);
  if (host_need > host.usable) {
    return "the head '" + nodes[0].name + "' needs " + gib(host_need) + " for the token embedding and host buffers" +
           (host.draft > 0 ? " and the draft model (" + gib(host.draft) + ")" : "") + " but has " + gib(host.usable) +
           " after " + held_back(host) + ": short by " + gib(host_need - host.usable);
  }
  uint64_t weights = c.input_weights + c.output_weights + c.other_weights, kv = 0, usable = 0;
  for (const LayerCost& l : c.layers) {
    weights += l.weights;
    kv += l.kv;
  }
  std::string where;
  bool reserved = false;
  for (const FlatDevice& f : s.flat()) {
    usable += f.usable;
    reserved = reserved || f.reserve.total() > 0;
    where += (where.empty() ? "" : ", ") + nodes[f.node].name +
             (nodes[f.node].devices.size() > 1 ? "/" + f.spec->name : "") + " " + gib(f.usable);
  }
  const uint64_t compute = c.compute_output + c.compute_sparse + c.host_output;
  const uint64_t total = weights + kv + compute + host.draft;
  if (total > usable) {
    return std::string(host.draft > 0 ? "the model and its draft need " : "the model needs ") + gib(total) +
           " (weights " + gib(weights) + ", KV cache " + gib(kv) + " for " + std::to_string(o.memory.parallel) + " x " +
           std::to_string(o.memory.context) + " tokens of " + kv_type_name(o.memory.kv_type) + ", compute " +
           gib(compute) + (host.draft > 0 ? ", draft " + gib(host.draft) : "") + ") but the nodes offer " +
           gib(usable) + (reserved ? " after margins and the unified-memory reserves (" : " after margins (") + where +
           "): short by " + gib(total - usable);
  }
  uint64_t largest_layer = 0;
  for (int l = 0; l < static_cast<int>(c.layers.size()); ++l) {
    largest_layer =
        std::max(largest_layer, c.layers[l].weights + c.layers[l].kv + compute_bytes(c, l, 1, false, false, true));
  }
  return "in all the model fits (" + gib(total) + " of " + gib(usable) +
         "), but not in contiguous layer ranges on these devices (" + where + "; one layer needs up to " +
         gib(largest_layer) + ")";
}

void fill_split(const std::vector<NodeSpec>& nodes, bool workers_first, Plan* plan) {
  LlamaSplit& s = plan->split;
  std::vector<int> head_gpus, workers;
  for (const DeviceAssignment& d : plan->devices) {
    if (d.head && d.kind == DeviceKind::cpu) s.cpu_layers += d.n_layers;
    if (d.head && d.kind == DeviceKind::gpu) {
      s.use_local_gpus = true;
      head_gpus.push_back(d.n_layers);
    }
  }
  // A worker is on the path when it holds a layer or the output head; its devices all register.
  size_t i = 0;
  for (size_t n = 0; n < nodes.size(); ++n) {
    bool used = false;
    const size_t begin = i;
    for (size_t d = 0; d < nodes[n].devices.size(); ++d, ++i)
      used = used || plan->devices[i].n_layers > 0 || plan->devices[i].output;
    if (n == 0 || !used) continue;
    s.rpc_nodes.push_back(nodes[n].name);
    for (size_t k = begin; k < i; ++k) workers.push_back(plan->devices[k].n_layers);
  }
  s.workers_first = workers_first && !workers.empty();
  const std::vector<int>& first = s.workers_first ? workers : head_gpus;
  const std::vector<int>& then = s.workers_first ? head_gpus : workers;
  s.device_layers = first;
  s.device_layers.insert(s.device_layers.end(), then.begin(), then.end());
}

// What one device holds under the chosen ranges.
DeviceAssignment assign(const FlatDevice& f, const NodeSpec& node, const ModelCosts& c, int first, int count,
                        bool output, bool pipeline, bool table_on_worker, bool rows_elsewhere) {
  DeviceAssignment d;
  d.node = node.name;
  d.device = f.spec->name;
  d.kind = f.spec->kind;
  d.hardware = f.spec->hardware.empty() ? device_kind_name(f.spec->kind) : f.spec->hardware;
  d.head = f.node == 0;
  d.host = f.host;
  d.free_bytes = f.spec->free_bytes;
  d.margin = f.margin;
  d.draft = f.draft;
  d.unified_memory = f.spec->unified_memory;
  d.reserve = f.reserve;
  d.bandwidth = f.spec->bandwidth;
  d.bandwidth_assumed = f.spec->bandwidth_assumed;
  d.first_layer = first;
  d.n_layers = count;
  d.output = output;
  uint64_t read = 0;
  for (int l = first; l < first + count; ++l) {
    d.weights += c.layers[l].weights;
    d.kv += c.layers[l].kv;
    read += c.layers[l].read_per_token;
  }
  if (d.host) {
    d.weights += c.input_weights + c.other_weights;
    d.compute += c.host_output;
  }
  if (gathers_embedding(f, first, count, table_on_worker)) {
    d.embedding_copy = true;
    d.weights += c.input_weights;
  }
  if (d.output) {
    d.weights += c.output_weights;
    read += c.output_read;
  }
  d.compute += device_compute(c, f, first, count, output, pipeline, rows_elsewhere);
  d.seconds_per_token = static_cast<double>(read) / d.bandwidth;
  return d;
}

Status validate_request(const std::vector<NodeSpec>& nodes, const PlanOptions& o) {
  TANDEM_RETURN_IF_ERROR(validate_nodes(nodes));
  for (size_t d = 1; d < nodes[0].devices.size(); ++d) {
    if (nodes[0].devices[d].kind == DeviceKind::cpu) {
      return Status::invalid_argument("node '" + nodes[0].name + "': the head's CPU must be its first device");
    }
  }
  if (!(o.hop_seconds >= 0)) return Status::invalid_argument("the per-hop link cost must not be negative");
  return Status::ok();
}

}  // namespace

std::map<std::string, std::pair<int, int>> layer_ranges(const LlamaSplit& split, const std::vector<NodeSpec>& nodes) {
  std::vector<std::pair<std::string, int>> runs;  // node, layers, in layer order
  if (!nodes.empty() && split.cpu_layers > 0) runs.emplace_back(nodes[0].name, split.cpu_layers);
  size_t worker_devices = 0;
  std::vector<std::pair<std::string, size_t>> workers;  // name, device count
  for (const std::string& name : split.rpc_nodes) {
    size_t count = 1;
    for (const NodeSpec& n : nodes) {
      if (n.name == name) count = std::max<size_t>(1, n.devices.size());
    }
    workers.emplace_back(name, count);
    worker_devices += count;
  }
  const size_t head_devices = split.device_layers.size() - std::min(split.device_layers.size(), worker_devices);
  size_t next = 0;
  auto take = [&](const std::string& name, size_t count) {
    int layers = 0;
    for (size_t k = 0; k < count && next < split.device_layers.size(); ++k) layers += split.device_layers[next++];
    runs.emplace_back(name, layers);
  };
  auto take_workers = [&] {
    for (const auto& [name, count] : workers) take(name, count);
  };
  if (split.workers_first) take_workers();
  if (!nodes.empty() && head_devices > 0) take(nodes[0].name, head_devices);
  if (!split.workers_first) take_workers();
  std::map<std::string, std::pair<int, int>> out;
  int layer = 0;
  for (const auto& [name, layers] : runs) {
    if (layers > 0) {
      auto [it, fresh] = out.try_emplace(name, layer, 0);
      it->second.second += layers;
    }
    layer += layers;
  }
  return out;
}

namespace {

// The plan for layer counts `ranges` (one per device in solver order) with the output head on
// device `output_index`; `best` says whether it fits.
Plan build_plan(const Solver& solver, const ModelCosts& c, const std::vector<NodeSpec>& nodes, const PlanOptions& o,
                bool table_on_worker, const std::vector<int>& ranges, int output_index, bool pipeline,
                const Cost& best) {
  Plan plan;
  plan.pipeline = pipeline;
  const auto& flat = solver.flat();
  std::vector<DeviceAssignment> in_layer_order;
  int layer = 0;
  for (size_t j = 0; j < flat.size(); ++j) {
    in_layer_order.push_back(assign(flat[j], nodes[flat[j].node], c, layer, ranges[j],
                                    static_cast<int>(j) == output_index, pipeline, table_on_worker,
                                    solver.rows_elsewhere(flat[j], layer, ranges[j])));
    layer += ranges[j];
  }
  // The plan lists devices node by node, the head first, whatever order the layers run in.
  std::vector<size_t> by_node(flat.size());
  std::iota(by_node.begin(), by_node.end(), size_t{0});
  std::sort(by_node.begin(), by_node.end(), [&](size_t a, size_t b) {
    return std::tie(flat[a].node, flat[a].index) < std::tie(flat[b].node, flat[b].index);
  });
  for (size_t j : by_node) plan.devices.push_back(in_layer_order[j]);
  if (!best.feasible()) {
    plan.failure = explain_failure(solver, c, nodes, o);
    return plan;
  }
  plan.fits = true;
  fill_split(nodes, solver.workers_first(), &plan);
  plan.split.embedding_on_worker = table_on_worker;
  // head -> each worker on the path -> back to the head
  const size_t crossings = plan.split.rpc_nodes.empty() ? 0 : plan.split.rpc_nodes.size() + 1;
  plan.link_seconds = o.hop_seconds * static_cast<double>(crossings);
  plan.seconds_per_token = plan.link_seconds;
  for (const DeviceAssignment& d : plan.devices) plan.seconds_per_token += d.seconds_per_token;
  return plan;
}

Plan solve_with(const ModelCosts& c, const std::vector<NodeSpec>& nodes, const PlanOptions& o, bool table_on_worker,
                uint64_t draft) {
  Solver solver(c, nodes, o, table_on_worker, draft);

  // Each worker in turn as the last one on the path.
  Cost best;
  std::vector<int> best_ranges(solver.flat().size(), 0);
  int output_index = -1;
  bool pipeline = true;
  const bool cpu_head = nodes[0].devices[0].kind == DeviceKind::cpu;
  for (const bool pp : cpu_head ? std::vector<bool>{false, true} : std::vector<bool>{true}) {
    for (int last = 0; last < static_cast<int>(nodes.size()); ++last) {
      std::vector<int> ranges;
      const Cost cost = solver.solve_for_last(last, pp, &ranges);
      if (cost < best) {
        best = cost;
        best_ranges = ranges;
        pipeline = pp;
        output_index = solver.path(last).back();
      }
    }
  }
  return build_plan(solver, c, nodes, o, table_on_worker, best_ranges, output_index, pipeline, best);
}

std::string node_list(const std::vector<NodeSpec>& nodes) {
  std::string s;
  for (const NodeSpec& n : nodes) s += (s.empty() ? "" : ", ") + n.name;
  return s;
}

// Checks a hand split against the nodes: one share per node, every layer once, one device on each
// node that holds layers. Fills `ranges` (per device in solver order) and `last` (the last node
// on the path).
Status check_hand_split(const Solver& solver, const std::vector<NodeSpec>& nodes,
                        const std::vector<config::LayerShare>& layers, int n_layer, std::vector<int>* ranges,
                        int* last) {
  const std::string given = "layers '" + config::format_layers(layers) + "'";
  if (layers.size() != nodes.size()) {
    return Status::invalid_argument(given + " gives " + std::to_string(layers.size()) + " share(s) for " +
                                    std::to_string(nodes.size()) +
                                    " nodes (one per node, head first: " + node_list(nodes) + ")");
  }
  int total = 0;
  for (size_t n = 0; n < nodes.size(); ++n) {
    total += layers[n].count;
    if (layers[n].count > 0 && nodes[n].devices.size() > 1) {
      return Status::invalid_argument(
          given + ": " + nodes[n].name + " has " + std::to_string(nodes[n].devices.size()) +
          " devices; a hand split gives layers to nodes of one device (let the planner place the others)");
    }
  }
  if (total != n_layer) {
    return Status::invalid_argument(given + " covers " + std::to_string(total) + " layers, the model has " +
                                    std::to_string(n_layer));
  }
  const auto& flat = solver.flat();
  ranges->assign(flat.size(), 0);
  *last = 0;
  int layer = 0;
  bool order_ok = true;
  std::vector<config::LayerShare> expected(layers.size());
  for (size_t j = 0; j < flat.size(); ++j) {
    const config::LayerShare& share = layers[flat[j].node];
    if (flat[j].index != 0) continue;
    (*ranges)[j] = share.count;
    expected[flat[j].node] = {share.count, share.count > 0 ? layer : 0};
    if (share.first >= 0 && share.count > 0 && share.first != layer) order_ok = false;
    if (share.count > 0 && flat[j].node > 0) *last = std::max(*last, flat[j].node);
    layer += share.count;
  }
  if (!order_ok) {
    const bool gpu_head = nodes[0].devices[0].kind == DeviceKind::gpu;
    return Status::invalid_argument(given + ": the ranges are not the order the layers run in (" +
                                    (gpu_head
                                         ? "on a GPU head the workers run the first layers and the head the last"
                                         : "on a CPU head the head runs the first layers, then each worker in turn") +
                                    "); these counts run as " + config::format_layers(expected));
  }
  return Status::ok();
}

Result<Plan> solve_hand_split(const ModelCosts& c, const std::vector<NodeSpec>& nodes, const PlanOptions& o,
                              bool table_on_worker, uint64_t draft) {
  Solver solver(c, nodes, o, table_on_worker, draft);
  std::vector<int> ranges;
  int last = 0;
  TANDEM_RETURN_IF_ERROR(check_hand_split(solver, nodes, o.layers, static_cast<int>(c.layers.size()), &ranges, &last));
  const auto& flat = solver.flat();
  const bool cpu_head = nodes[0].devices[0].kind == DeviceKind::cpu;
  const bool pipeline = !cpu_head || o.layers[0].count == 0;
  const std::vector<int> seq = solver.path(last);
  // Priced as the solver prices a path, so that its figures compare with the solver's own plans.
  Cost cost{last > 0 ? 2 * solver.hop_ps() : 0, 0};
  std::string short_of;
  int layer = 0;
  for (size_t k = 0; k < seq.size(); ++k) {
    const FlatDevice& f = flat[seq[k]];
    const int n = ranges[seq[k]];
    const bool new_node = k == 0 || flat[seq[k - 1]].node != f.node;
    const bool pays_hop = f.node > 0 && f.node != last && n > 0 && new_node;
    const Cost next = solver.extend(f, cost, layer, n, k + 1 == seq.size(), pays_hop, pipeline);
    if (!next.feasible() && short_of.empty()) {
      const uint64_t need = solver.need(f, layer, n, k + 1 == seq.size(), pipeline);
      short_of = nodes[f.node].name + " needs " + format_bytes(need) + " for its " + std::to_string(n) +
                 " layer(s) but has " + format_bytes(f.usable) + " after " + held_back(f) + ": short by " +
                 format_bytes(need - f.usable);
    }
    if (next.feasible()) cost = next;
    layer += n;
  }
  if (!short_of.empty()) cost = Cost{};
  Plan plan = build_plan(solver, c, nodes, o, table_on_worker, ranges, seq.back(), pipeline, cost);
  if (!short_of.empty())
    plan.failure = "with the hand-made split layers '" + config::format_layers(o.layers) + "', " + short_of;
  return plan;
}

}  // namespace

const char* parallelism_name(Parallelism p) { return p == Parallelism::ffn_tensor ? "ffn-tensor" : "layer"; }

namespace {

// The plan of `info` (costs `c`) over `nodes` with `draft` bytes held on the head's first device.
Result<Plan> solve_costs(const ModelInfo& info, const ModelCosts& c, const std::vector<NodeSpec>& nodes,
                         const PlanOptions& o, uint64_t draft) {
  if (o.parallelism == Parallelism::ffn_tensor) {
    if (!o.layers.empty()) {
      return Status::invalid_argument("layers '" + config::format_layers(o.layers) +
                                      "' is a layer split: leave [model] layers / --layers out under parallelism "
                                      "\"ffn-tensor\", where every node runs every layer");
    }
    return solve_ffn_tensor(info, c, nodes, o, draft);
  }
  if (!o.layers.empty()) {
    auto plan = solve_hand_split(c, nodes, o, true, draft);
    if (!plan.is_ok() || plan->fits) return plan;
    auto without = solve_hand_split(c, nodes, o, false, draft);
    return without.is_ok() && without->fits ? without : plan;
  }
  Plan plan = solve_with(c, nodes, o, true, draft);
  // The worker's copy of the table saves the link a prompt's embedding rows; memory is worth more.
  if (!plan.fits) {
    Plan without = solve_with(c, nodes, o, false, draft);
    if (without.fits) return without;
  }
  return plan;
}

bool gpu_head(const std::vector<NodeSpec>& nodes) { return nodes[0].devices[0].kind == DeviceKind::gpu; }

}  // namespace

Result<Plan> solve(const ModelInfo& info, const std::vector<NodeSpec>& nodes, const PlanOptions& o) {
  TANDEM_RETURN_IF_ERROR(validate_request(nodes, o));
  auto costs = model_costs(info, o.memory);
  if (!costs.is_ok()) return costs.status();
  auto draft = draft_cost(info, o.speculative, o.memory, gpu_head(nodes));
  if (!draft.is_ok()) return draft.status();
  auto plan = solve_costs(info, costs.value(), nodes, o, draft->total());
  if (plan.is_ok()) plan->draft = draft.value();
  return plan;
}

Result<uint64_t> draft_room(const ModelInfo& info, const std::vector<NodeSpec>& nodes, const PlanOptions& o) {
  TANDEM_RETURN_IF_ERROR(validate_request(nodes, o));
  auto costs = model_costs(info, o.memory);
  if (!costs.is_ok()) return costs.status();
  auto fits = [&](uint64_t bytes) -> Result<bool> {
    auto p = solve_costs(info, costs.value(), nodes, o, bytes);
    if (!p.is_ok()) return p.status();
    return p->fits;
  };
  auto alone = fits(0);
  if (!alone.is_ok()) return alone.status();
  if (!alone.value()) return uint64_t{0};
  // In MiB: lo fits, hi does not (no device holds more than it has free).
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  uint64_t lo = 0, hi = nodes[0].devices[0].free_bytes / kMiB + 1;
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    auto f = fits(mid * kMiB);
    if (!f.is_ok()) return f.status();
    (f.value() ? lo : hi) = mid;
  }
  return lo * kMiB;
}

}  // namespace tandem::plan
