// Planning inputs taken from a tandem.toml (config::Config).
#pragma once

#include <memory>

#include "common/status.h"
#include "config/config.h"
#include "plan/cluster.h"
#include "plan/solver.h"

namespace tandem::plan {

// [model] context/parallel/kv_type and [plan] margin/margin_bytes/hop_ms as solver options.
// Errors name the key ("[model] kv_type: unknown KV cache type 'q3'").
Result<PlanOptions> plan_options_from_config(const config::Config& config);

// The nodes of a config: the head ([cluster] head_*) then each [[worker]]. When every node
// declares its memory, they are used as declared (a StaticNodeSource: planning without asking);
// otherwise the workers must be asked live (a LiveNodeSource, which says that this is not
// available yet). Never null.
std::unique_ptr<NodeSource> node_source_from_config(const config::Config& config);

}  // namespace tandem::plan
