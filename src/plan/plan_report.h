// How a plan explains itself: a table for people and JSON for programs.
#pragma once

#include <string>

#include "plan/model_info.h"
#include "plan/solver.h"

namespace tandem::plan {

// Per node and device: layer range, weights, KV cache, compute, free memory, margin and headroom
// (GiB), then the bandwidth bound on decode speed, each parallelism's estimate and libllama's split;
// when the plan does not fit, the reason and the suggestions instead of the speed.
std::string format_plan(const Plan& plan, const ModelInfo& info, const PlanOptions& options);

// The plan's split as [model] layers and --layers take it: one share per node, head first, the
// ranges `tandem plan` prints ("-,0-29,30-61"), so a plan can be pinned in tandem.toml.
std::string layer_shares(const Plan& plan);

// The same as JSON: {"fits", "model", "request", "parallelism", "devices": [...], "split": {...},
// "seconds_per_token", "tokens_per_second", "failure", "suggestions", "exchanges_per_token",
// "estimates": [{"parallelism", "fits", "tokens_per_second", "failure"}]}; bytes as integers.
std::string plan_to_json(const Plan& plan, const ModelInfo& info, const PlanOptions& options, int indent = 2);

}  // namespace tandem::plan
