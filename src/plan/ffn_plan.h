// The planner's side of the FFN tensor split (`parallelism = "ffn-tensor"`).
#pragma once

#include <vector>

#include "plan/memory_model.h"
#include "plan/model_info.h"
#include "plan/solver.h"

namespace tandem::plan {

// Sizes every device under the FFN tensor split: each device that runs layers (every worker's, and
// the head's GPUs) holds its part of the FFNs and output head (plan/ffn_split.h), the other weights
// whole, the whole KV cache and a compute buffer for every layer; the head's host keeps the token
// embedding. Per generated token the slowest device's reads and (layers + 1) swaps of partial sums
// at `exchange_seconds` each. The head's first device also holds `draft` bytes (the draft model).
// Not fitting, or a model whose FFNs cannot be split, is a plan with `fits` false and the reason.
Plan solve_ffn_tensor(const ModelInfo& info, const ModelCosts& costs, const std::vector<NodeSpec>& nodes,
                      const PlanOptions& options, uint64_t draft);

}  // namespace tandem::plan
