#include <cstdio>

#include "cli/commands.h"
#include "gateway/cluster_nodes.h"
#include "common/units.h"
#include "config/config.h"
#include "plan/model_info.h"
#include "plan/plan_config.h"
#include "plan/plan_report.h"

namespace tandem::cli {

namespace {

struct PlanFlags {
  std::string config, model, kv_type, margin_bytes;
  uint32_t context = 4096, parallel = 1;
  double margin = 0.05, hop_ms = 0.5;
  std::vector<std::string> nodes;
  bool head_cpu = false, json = false;
  CLI::Option *context_opt = nullptr, *parallel_opt = nullptr, *margin_opt = nullptr, *hop_opt = nullptr;
};

// Options and nodes from the config file (if any), then the flags on top.
void resolve(const PlanFlags& f, std::string* model, plan::PlanOptions* options, std::vector<plan::NodeSpec>* nodes) {
  std::unique_ptr<plan::NodeSource> source;
  if (!f.config.empty()) {
    auto c = config::load_config(f.config);
    if (!c.is_ok()) fail(c.status().message());
    auto o = plan::plan_options_from_config(c.value());
    if (!o.is_ok()) fail(o.status().message());
    *options = o.value();
    *model = c->model.path;
    source = plan::node_source_from_config(c.value());
    // Nodes whose memory the file does not declare are asked live, over the control channel.
    if (dynamic_cast<plan::LiveNodeSource*>(source.get()) != nullptr) {
      source = std::make_unique<gateway::LiveClusterSource>(c.value());
    }
  }
  if (!f.model.empty()) *model = f.model;
  if (model->empty()) fail("no model: give --model or [model] path in the config", 2);
  if (f.context_opt->count() || f.config.empty()) options->memory.context = f.context;
  if (f.parallel_opt->count() || f.config.empty()) options->memory.parallel = f.parallel;
  if (f.margin_opt->count() || f.config.empty()) options->memory.margin_fraction = f.margin;
  if (f.hop_opt->count() || f.config.empty()) options->hop_seconds = f.hop_ms / 1e3;
  if (!f.kv_type.empty()) {
    auto kv = plan::parse_kv_type(f.kv_type);
    if (!kv.is_ok()) fail(kv.status().message(), 2);
    options->memory.kv_type = kv.value();
  }
  if (!f.margin_bytes.empty()) {
    auto b = parse_bytes(f.margin_bytes);
    if (!b.is_ok()) fail(b.status().message(), 2);
    options->memory.margin_bytes = b.value();
  }
  if (!f.nodes.empty()) {
    for (size_t i = 0; i < f.nodes.size(); ++i) {
      const auto kind = i == 0 && f.head_cpu ? plan::DeviceKind::cpu : plan::DeviceKind::gpu;
      auto n = plan::parse_node_flag(f.nodes[i], kind);
      if (!n.is_ok()) fail(n.status().message(), 2);
      nodes->push_back(n.value());
    }
    return;
  }
  if (!source) fail("no nodes: give --node NAME=MEM[@BW] (the head first) or -c tandem.toml", 2);
  auto listed = source->nodes();
  if (!listed.is_ok()) fail(listed.status().message());
  *nodes = listed.value();
}

void register_plan(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "Place a model's layers over the head and workers, and explain the memory it needs");
  static PlanFlags f;
  cmd->add_option("-c,--config", f.config, "tandem.toml: model, context, parallel and nodes from the file");
  cmd->add_option("-m,--model", f.model, "GGUF file (the first split of a split model)");
  f.context_opt = cmd->add_option("--context", f.context, "Tokens per sequence (default 4096)");
  f.parallel_opt = cmd->add_option("--parallel", f.parallel, "Sequences served at once (default 1)");
  cmd->add_option("--kv-type", f.kv_type, "KV cache type: f16 (default), q8_0, q4_0, ...");
  cmd->add_option("--node", f.nodes, "NAME=MEM[@BW], e.g. box-a=128GiB@273GB/s; the first is the head (repeat)");
  cmd->add_flag("--head-cpu", f.head_cpu, "The head's layers run on its CPU (no local GPU)");
  f.margin_opt = cmd->add_option("--margin", f.margin, "Fraction of each device's free memory held back (default 0.05)");
  cmd->add_option("--margin-bytes", f.margin_bytes, "Bytes held back on each device on top (default 1GiB)");
  f.hop_opt = cmd->add_option("--hop-ms", f.hop_ms, "Link cost per cable crossing per token, ms (default 0.5)");
  cmd->add_flag("--json", f.json, "Print the plan as JSON");
  cmd->callback([] {
    std::string model;
    plan::PlanOptions options;
    std::vector<plan::NodeSpec> nodes;
    resolve(f, &model, &options, &nodes);
    auto info = plan::read_model_info(model);
    if (!info.is_ok()) fail(info.status().message());
    auto p = plan::make_plan(info.value(), nodes, options);
    if (!p.is_ok()) fail(p.status().message(), p.status().code() == StatusCode::invalid_argument ? 2 : 1);
    if (f.json) {
      std::printf("%s\n", plan::plan_to_json(p.value(), info.value(), options).c_str());
    } else {
      std::fputs(plan::format_plan(p.value(), info.value(), options).c_str(), stdout);
    }
    std::fflush(stdout);
    if (!p->fits) {
      std::string msg = "does not fit: " + p->failure;
      if (!p->suggestions.empty()) msg += "; would fit: " + p->suggestions.front();
      fail(msg);
    }
  });
}

}  // namespace

TANDEM_COMMAND(35, register_plan);

}  // namespace tandem::cli
