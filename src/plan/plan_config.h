// Planning inputs taken from a tandem.toml (config::Config).
#pragma once

#include <optional>
#include <utility>

#include "common/status.h"
#include "config/config.h"
#include "plan/cluster.h"
#include "plan/solver.h"

namespace tandem::plan {

// [model] context/parallel/kv_type/layers/prompt_cache/speculative/draft_model/draft_max and [plan]
// margin/margin_bytes/os_reserve/load_reserve/hop_ms as solver options:
// every command that plans from a config (plan -c, serve, doctor, worker seed -c) takes them here.
// With speculative = "draft" it reads the draft's GGUF header (read_draft_model).
// Errors name the key ("[model] kv_type: unknown KV cache type 'q3'") or the draft's file.
Result<PlanOptions> plan_options_from_config(const config::Config& config);

// The nodes as the config declares them, asking no one: the head ([cluster] head_memory,
// head_device, head_bandwidth) then each [[worker]] (memory, bandwidth, unified_memory), one
// device each; head_device "unified" and unified_memory make a unified-memory node. For
// planning where the live figures cannot be had (`tandem plan -c --declared`, `tandem worker seed
// -c` on a worker). Error: a node without a declared memory, named.
Result<std::vector<NodeSpec>> declared_nodes(const config::Config& config);

// The layers [first, last] that node `name` runs under the plan of the declared figures (the
// config's [model] layers when it gives them); nullopt when the plan gives it none. Errors: a
// node without declared memory, a plan that does not fit, a bad hand split.
Result<std::optional<std::pair<int, int>>> declared_layer_range(const config::Config& config, const ModelInfo& info,
                                                                const std::string& name);

}  // namespace tandem::plan
