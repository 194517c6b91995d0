#include <cstdio>

#include "cli/commands.h"
#include "cli/config_flags.h"
#include "cluster/live_nodes.h"
#include "common/units.h"
#include "config/config.h"
#include "plan/model_info.h"
#include "plan/plan_config.h"
#include "plan/plan_report.h"

namespace tandem::cli {

namespace {

using config::Config;

struct PlanFlags {
  std::string config;
  std::vector<std::string> nodes;
  bool head_cpu = false, unified = false, json = false, declared = false;
};

// The nodes: --node flags, else the config's cluster asked live as `tandem serve` asks it, or its
// declared figures with --declared.
std::vector<plan::NodeSpec> resolve_nodes(const PlanFlags& f, const Config& c) {
  std::vector<plan::NodeSpec> nodes;
  if (!f.nodes.empty()) {
    for (size_t i = 0; i < f.nodes.size(); ++i) {
      const auto kind = i == 0 && f.head_cpu ? plan::DeviceKind::cpu : plan::DeviceKind::gpu;
      auto n = plan::parse_node_flag(f.nodes[i], kind);
      if (!n.is_ok()) fail(n.status().message(), 2);
      // A CPU head's layers are in its memory, beside everything else: not a unified GPU.
      for (auto& d : n->devices) d.unified_memory = f.unified && d.kind == plan::DeviceKind::gpu;
      nodes.push_back(n.value());
    }
    return nodes;
  }
  if (f.config.empty()) fail("no nodes: give --node NAME=MEM[@BW] (the head first) or -c tandem.toml", 2);
  auto listed = f.declared ? plan::declared_nodes(c) : cluster::live_nodes(c);
  if (!listed.is_ok()) {
    std::string msg = listed.status().message();
    if (!f.declared) msg += " (to plan from the memory the file declares, without asking: --declared)";
    fail(msg, listed.status().code() == StatusCode::invalid_argument ? 2 : 1);
  }
  return listed.value();
}

void register_plan(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("plan", "Place a model's layers over the head and workers, and explain the memory it needs");
  static PlanFlags f;
  static ConfigFlags flags(cmd);
  cmd->add_option(
      "-c,--config", f.config,
      "tandem.toml: the model, its keys, and the cluster asked live as `tandem serve` asks it (the same plan)");
  cmd->add_flag("--declared", f.declared, "With -c: plan from the memory the file declares, asking no one");
  cmd->add_option("--node", f.nodes, "NAME=MEM[@BW], e.g. box-a=128GiB@273GB/s; the first is the head (repeat)");
  cmd->add_flag("--head-cpu", f.head_cpu, "With --node: the head's layers run on its CPU (no local GPU)");
  cmd->add_flag("--unified", f.unified,
                "With --node: each node's GPU shares its system memory (a GB10): the plan holds back the prompt "
                "cache, the OS's working set and load transients there (as head_device = \"unified\" and [[worker]] "
                "unified_memory do)");
  cmd->add_flag("--json", f.json, "Print the plan as JSON");
  add_model_flags(flags);
  flags.size(
      "--prompt-cache", "[model] prompt_cache",
      "Memory for the prompt cache on each node (default 8GiB; 0: off): held back on unified-memory nodes",
      [](Config& c) -> uint64_t& { return c.model.prompt_cache; }, /*zero_off=*/true);
  add_plan_flags(flags);
  cmd->callback([] {
    auto c = flags.resolve(f.config);
    if (!c.is_ok()) fail(c.status().message(), 2);
    if (c->model.path.empty()) fail("no model: give --model or [model] path in the config", 2);
    auto options = plan::plan_options_from_config(c.value());
    // A bad key is a usage error; a draft file that is not there is a failed operation, as the model's.
    if (!options.is_ok()) fail(options.status().message(), options.status().code() == StatusCode::not_found ? 1 : 2);
    const std::vector<plan::NodeSpec> nodes = resolve_nodes(f, c.value());
    auto info = plan::read_model_info(c->model.path);
    if (!info.is_ok()) fail(info.status().message());
    auto p = plan::make_plan(info.value(), nodes, options.value());
    if (!p.is_ok()) fail(p.status().message(), p.status().code() == StatusCode::invalid_argument ? 2 : 1);
    if (f.json) {
      std::printf("%s\n", plan::plan_to_json(p.value(), info.value(), options.value()).c_str());
    } else {
      std::fputs(plan::format_plan(p.value(), info.value(), options.value()).c_str(), stdout);
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
