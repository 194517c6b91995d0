#include "plan/plan_report.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/units.h"

namespace tandem::plan {
namespace {

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}

std::string signed_gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}

std::string layers_text(const DeviceAssignment& d) {
  std::string t = d.n_layers == 0 ? "-"
                  : d.n_layers == 1
                      ? std::to_string(d.first_layer)
                      : std::to_string(d.first_layer) + "-" + std::to_string(d.first_layer + d.n_layers - 1);
  if (d.host || d.embedding_copy) t += " +embd";
  if (d.output) t += " +out";
  return t;
}

// Each parallelism's figures, this plan's marked: what choosing the other would give.
void estimates_text(const Plan& plan, std::ostream& out) {
  for (const ParallelismEstimate& e : plan.estimates) {
    char line[160];
    if (e.fits) {
      std::snprintf(line, sizeof line, "%.1f tok/s bandwidth bound", e.tokens_per_second);
    } else {
      std::snprintf(line, sizeof line, "does not fit");
    }
    out << "parallelism " << parallelism_name(e.parallelism)
        << (e.parallelism == plan.parallelism ? " (this plan)" : "") << ": " << line
        << (e.fits || e.failure.empty() ? "" : ": " + e.failure) << "\n";
  }
}

std::string request_text(const ModelInfo& info, const PlanOptions& o) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s, %u layers; context %u x %u sequences (%llu KV cells, %s), margin %.0f%% + %s",
                info.name.empty() ? info.arch.c_str() : info.name.c_str(), info.n_layer, o.memory.context,
                o.memory.parallel, static_cast<unsigned long long>(kv_cells(o.memory)),
                kv_type_name(o.memory.kv_type).c_str(), o.memory.margin_fraction * 100,
                format_bytes(o.memory.margin_bytes).c_str());
  return buf;
}

// The draft's line under the model's: what it is and each part of what it holds on the head, or
// for ngram that there is no draft model. Empty when speculative decoding is off.
std::string draft_text(const Plan& plan, const PlanOptions& o) {
  const SpeculativeOptions& s = o.speculative;
  const std::string step = "up to " + std::to_string(s.draft_max) + " tokens a step";
  if (s.mode == Speculative::ngram) {
    return "draft    none: ngram drafts " + step + " from the request's own tokens (no model; the head keeps " +
           std::to_string(o.memory.outputs_per_sequence) + " rows of logits a sequence to check them, in its compute)";
  }
  if (s.mode != Speculative::draft || !s.draft || plan.devices.empty()) return "";
  const ModelInfo& m = *s.draft;
  const DraftCost& d = plan.draft;
  const DeviceAssignment& head = plan.devices.front();
  std::string t = "draft    " + (m.name.empty() ? m.arch : m.name) + " (" + m.arch + ", " + std::to_string(m.n_layer) +
                  (m.n_layer == 1 ? " layer, " : " layers, ") + (m.file_type.empty() ? "?" : m.file_type) + "), " +
                  step + ", on " + head.node + (head.device != head.node ? "/" + head.device : "") + ": " +
                  gib(d.total()) + " GiB = weights " + gib(d.weights) + " + KV " + gib(d.kv) + " + compute " +
                  gib(d.compute);
  if (d.hidden > 0) t += " + target hidden states " + gib(d.hidden);
  return t;
}

}  // namespace

std::string format_plan(const Plan& plan, const ModelInfo& info, const PlanOptions& o) {
  std::ostringstream out;
  out << "model    " << request_text(info, o) << "\n";
  if (const std::string draft = draft_text(plan, o); !draft.empty()) out << draft << "\n";
  out << "\n";
  // A unified-memory node's reserve and a draft model get their own columns; plans without them
  // keep the usual table.
  bool reserved = false, drafted = false;
  for (const DeviceAssignment& d : plan.devices) {
    reserved = reserved || d.reserve.total() > 0;
    drafted = drafted || d.draft > 0;
  }
  char line[320];
  std::snprintf(line, sizeof line, "%-12s %-8s %-17s %8s %8s %8s", "node", "device", "layers", "weights", "KV",
                "compute");
  out << line << (drafted ? "    draft" : "");
  std::snprintf(line, sizeof line, " %8s %8s", "free", "margin");
  out << line << (reserved ? "  reserved" : "");
  std::snprintf(line, sizeof line, " %9s %8s\n", "headroom", "ms/tok");
  out << line;
  for (const DeviceAssignment& d : plan.devices) {
    std::snprintf(line, sizeof line, "%-12s %-8s %-17s %8s %8s %8s", d.node.c_str(), d.device.c_str(),
                  layers_text(d).c_str(), gib(d.weights).c_str(), gib(d.kv).c_str(), gib(d.compute).c_str());
    out << line;
    if (drafted) {
      std::snprintf(line, sizeof line, " %8s", gib(d.draft).c_str());
      out << line;
    }
    std::snprintf(line, sizeof line, " %8s %8s", gib(d.free_bytes).c_str(), gib(d.margin).c_str());
    out << line;
    if (reserved) {
      std::snprintf(line, sizeof line, " %9s", gib(d.reserve.total()).c_str());
      out << line;
    }
    std::snprintf(line, sizeof line, " %9s %8.2f\n", signed_gib(d.headroom()).c_str(), d.seconds_per_token * 1e3);
    out << line;
  }
  out << "(GiB; headroom = free - margin" << (reserved ? " - reserved" : "") << " - weights - KV - compute"
      << (drafted ? " - draft" : "") << ")\n";
  for (const DeviceAssignment& d : plan.devices) {
    if (!d.unified_memory || d.reserve.total() == 0) continue;
    out << d.node << (d.device != d.node ? "/" + d.device : "")
        << ": unified memory (the GPU shares the system's): free is MemAvailable-style; reserved "
        << gib(d.reserve.total()) << " GiB = prompt cache " << gib(d.reserve.prompt_cache) << " + OS "
        << gib(d.reserve.os) << " + load transients " << gib(d.reserve.load)
        << " ([model] prompt_cache, [plan] os_reserve, load_reserve)\n";
  }
  std::string assumed;
  for (const DeviceAssignment& d : plan.devices) {
    if (d.bandwidth_assumed) assumed += (assumed.empty() ? "" : ", ") + d.node;
  }
  if (!assumed.empty()) out << "bandwidth not given for " << assumed << ": assumed 273 GB/s\n";
  out << "\n";
  if (!plan.fits) {
    out << "does not fit: " << plan.failure << "\n";
    if (plan.suggestions.empty()) {
      out << "nothing simple fits: add nodes or memory, or use a smaller quantisation of the model\n";
    }
    for (const std::string& s : plan.suggestions) out << "would fit: " << s << "\n";
    estimates_text(plan, out);
    return out.str();
  }
  int64_t min_headroom = INT64_MAX;
  for (const DeviceAssignment& d : plan.devices) {
    if (d.n_layers > 0 || d.host || d.output) min_headroom = std::min(min_headroom, d.headroom());
  }
  // An upper bound (bytes read at full bandwidth plus the link), not a prediction: real decoding
  // reaches a fraction of it (docs/benchmark.md).
  std::snprintf(line, sizeof line,
                "fits: smallest headroom %s GiB; bandwidth bound %.1f tok/s (%.1f ms/token, link %.2f ms)\n",
                signed_gib(min_headroom).c_str(), plan.tokens_per_second(), plan.seconds_per_token * 1e3,
                plan.link_seconds * 1e3);
  out << line;
  estimates_text(plan, out);
  if (plan.parallelism == Parallelism::ffn_tensor) {
    out << "every node runs every layer: the FFNs and the output head split across the devices, attention, "
           "router and KV cache whole on each; "
        << plan.exchanges_per_token << " swaps of partial sums per token at " << o.exchange_seconds * 1e3
        << " ms each ([plan] exchange_ms)\n";
    out << "libllama: one meta device over " << (plan.split.use_local_gpus ? "the head's GPUs and " : "")
        << "the devices of [";
    for (size_t i = 0; i < plan.split.rpc_nodes.size(); ++i) out << (i ? ", " : "") << plan.split.rpc_nodes[i];
    out << "]\n";
    return out.str();
  }
  out << "libllama: cpu_layers " << plan.split.cpu_layers << ", device_layers [";
  for (size_t i = 0; i < plan.split.device_layers.size(); ++i) out << (i ? ", " : "") << plan.split.device_layers[i];
  out << "], local GPUs "
      << (plan.split.use_local_gpus ? (plan.split.workers_first ? "yes, after the RPC servers" : "yes") : "no")
      << ", RPC servers [";
  for (size_t i = 0; i < plan.split.rpc_nodes.size(); ++i) out << (i ? ", " : "") << plan.split.rpc_nodes[i];
  out << "]\n";
  out << "as [model] layers (head first): \"" << layer_shares(plan) << "\"\n";
  for (const DeviceAssignment& d : plan.devices) {
    if (d.embedding_copy) {
      out << "token embedding: a copy on " << d.node << (d.device != d.node ? "/" + d.device : "")
          << ", which runs layer 0 (4 bytes per token cross the link instead of a row)\n";
    }
  }
  if (plan.fits && !plan.split.embedding_on_worker) {
    out << "token embedding: on the head only (no room for a copy on the worker that runs layer 0)\n";
  }
  return out.str();
}

std::string plan_to_json(const Plan& plan, const ModelInfo& info, const PlanOptions& o, int indent) {
  nlohmann::ordered_json j;
  j["fits"] = plan.fits;
  j["model"] = {{"file", info.files.empty() ? "" : info.files.front()}, {"arch", info.arch}, {"n_layer", info.n_layer}};
  j["request"] = {{"context", o.memory.context},
                  {"parallel", o.memory.parallel},
                  {"kv_type", kv_type_name(o.memory.kv_type)},
                  {"kv_cells", kv_cells(o.memory)},
                  {"margin_fraction", o.memory.margin_fraction},
                  {"margin_bytes", o.memory.margin_bytes},
                  {"prompt_cache", o.memory.prompt_cache},
                  {"os_reserve", o.memory.os_reserve},
                  {"load_reserve", o.memory.load_reserve},
                  {"hop_seconds", o.hop_seconds},
                  {"exchange_seconds", o.exchange_seconds}};
  j["parallelism"] = parallelism_name(plan.parallelism);
  nlohmann::ordered_json devices = nlohmann::ordered_json::array();
  for (const DeviceAssignment& d : plan.devices) {
    devices.push_back(
        {{"node", d.node},
         {"device", d.device},
         {"kind", d.hardware},
         {"first_layer", d.first_layer},
         {"n_layers", d.n_layers},
         {"embedding", d.host || d.embedding_copy},
         {"output", d.output},
         {"weights", d.weights},
         {"kv", d.kv},
         {"compute", d.compute},
         {"draft", d.draft},
         {"free", d.free_bytes},
         {"margin", d.margin},
         {"unified_memory", d.unified_memory},
         {"reserved", d.reserve.total()},
         {"reserve", {{"prompt_cache", d.reserve.prompt_cache}, {"os", d.reserve.os}, {"load", d.reserve.load}}},
         {"headroom", d.headroom()},
         {"bandwidth", d.bandwidth},
         {"bandwidth_assumed", d.bandwidth_assumed},
         {"seconds_per_token", d.seconds_per_token}});
  }
  j["devices"] = devices;
  j["split"] = {{"cpu_layers", plan.split.cpu_layers},
                {"use_local_gpus", plan.split.use_local_gpus},
                {"workers_first", plan.split.workers_first},
                {"device_layers", plan.split.device_layers},
                {"rpc_nodes", plan.split.rpc_nodes}};
  j["pipeline_parallel"] = plan.pipeline;
  j["seconds_per_token"] = plan.seconds_per_token;
  j["link_seconds"] = plan.link_seconds;
  j["tokens_per_second"] = plan.tokens_per_second();
  j["exchanges_per_token"] = plan.exchanges_per_token;
  j["failure"] = plan.failure;
  j["suggestions"] = plan.suggestions;
  nlohmann::ordered_json estimates = nlohmann::ordered_json::array();
  for (const ParallelismEstimate& e : plan.estimates) {
    estimates.push_back({{"parallelism", parallelism_name(e.parallelism)},
                         {"fits", e.fits},
                         {"tokens_per_second", e.tokens_per_second},
                         {"failure", e.failure}});
  }
  j["estimates"] = estimates;
  const SpeculativeOptions& s = o.speculative;
  nlohmann::ordered_json spec = {{"mode", speculative_name(s.mode)},
                                 {"draft_max", s.draft_max},
                                 {"outputs_per_sequence", o.memory.outputs_per_sequence}};
  if (s.mode == Speculative::draft && s.draft) {
    const ModelInfo& m = *s.draft;
    const DraftCost& d = plan.draft;
    spec["draft"] = {{"file", m.files.empty() ? "" : m.files.front()},
                     {"arch", m.arch},
                     {"name", m.name},
                     {"n_layer", m.n_layer},
                     {"file_type", m.file_type},
                     {"eagle3", is_eagle3(m)},
                     {"node", plan.devices.empty() ? "" : plan.devices.front().node},
                     {"device", plan.devices.empty() ? "" : plan.devices.front().device},
                     {"weights", d.weights},
                     {"kv", d.kv},
                     {"compute", d.compute},
                     {"hidden_states", d.hidden},
                     {"total", d.total()}};
  }
  j["speculative"] = spec;
  return j.dump(indent);
}

std::string layer_shares(const Plan& plan) {
  std::vector<config::LayerShare> shares;
  std::string node;
  for (const DeviceAssignment& d : plan.devices) {
    if (shares.empty() || d.node != node) {
      shares.push_back({0, -1});
      node = d.node;
    }
    config::LayerShare& s = shares.back();
    if (d.n_layers == 0) continue;
    if (s.first < 0) s.first = d.first_layer;
    s.count += d.n_layers;
  }
  for (auto& s : shares) {
    if (s.count == 0) s.first = 0;  // printed "-"
  }
  return config::format_layers(shares);
}

}  // namespace tandem::plan
