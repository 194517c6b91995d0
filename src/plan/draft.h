// Speculative decoding as the planner counts it ([model] speculative, draft_model, draft_max).
//
// `ngram` drafts from the request's own tokens: no model, no memory beyond the extra rows of
// logits the head keeps to check the drafted tokens (MemoryOptions::outputs_per_sequence).
// `draft` runs a second, small model on the head, whole, on the head's first device (its GPU, or
// its CPU on a head without one), with its own context of the same size as the model's
// (llama.cpp's common/speculative.cpp): its weights, its own KV cache (its layers, context x
// parallel cells, in [model] kv_type), its compute and logits buffers, and, for an EAGLE3 draft
// (arch "eagle3"), the model's hidden states it reads at three of its layers. The planner holds
// all of that on the head before it places the model's layers (docs/planning.md, "The draft").
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "plan/memory_model.h"
#include "plan/model_info.h"

namespace tandem::plan {

enum class Speculative { off, ngram, draft };
const char* speculative_name(Speculative s);  // "off", "ngram", "draft"
// "off", "ngram" or "draft" ([model] speculative); an error names the value otherwise.
Result<Speculative> parse_speculative(const std::string& name);

struct SpeculativeOptions {
  Speculative mode = Speculative::off;
  uint32_t draft_max = 8;  // tokens drafted per step at most ([model] draft_max)
  // mode draft: the draft's GGUF as read_draft_model read it; shared, because every plan tried
  // (each suggestion is one) copies its options. Null otherwise.
  std::shared_ptr<const ModelInfo> draft;
};

// What the draft holds on the head's first device, in bytes. All zero unless mode is draft.
struct DraftCost {
  uint64_t weights = 0;  // every tensor of its file: it runs whole on that device
  uint64_t kv = 0;       // its own KV cache: its layers x (context x parallel cells) in the KV type
  // Its context's compute buffer (sized as the model's are, with its output head on the device,
  // and, on a GPU head, the CPU side of its scheduler) and its logits buffer (a row a sequence).
  uint64_t compute = 0;
  // EAGLE3 only: the model's hidden states at the tapped layers, a batch of them in the model's
  // output buffer and again in the draft's input, and the draft's own hidden-state rows.
  uint64_t hidden = 0;
  uint64_t total() const { return weights + kv + compute + hidden; }
};

// Reads the draft's GGUF. The error names the file as the draft's: missing, not a GGUF, corrupt.
Result<std::shared_ptr<const ModelInfo>> read_draft_model(const std::string& path);

bool is_eagle3(const ModelInfo& info);  // arch "eagle3"

// What `s.draft` costs beside `target` under `memory` (the same context, parallel and KV type as
// the model), on the head's first device, a GPU when `gpu_head`. Zero when `s.mode` is not draft.
// Errors: an EAGLE3 draft made for a model of another hidden size (it could not read this one's
// hidden states), options model_costs refuses.
Result<DraftCost> draft_cost(const ModelInfo& target, const SpeculativeOptions& s, const MemoryOptions& memory,
                             bool gpu_head);

// `info` with its matrices in `type` where that is smaller than theirs and their rows hold whole
// blocks of it (norms and vectors stay): about what the same draft quantised to `type` weighs.
ModelInfo requantized(const ModelInfo& info, int type);

}  // namespace tandem::plan
