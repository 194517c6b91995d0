// Draft models for speculative decoding, written for a given target model: random weights, and
// the target's own tokenizer, so that llama.cpp's speculative decoding (common/speculative.h)
// takes them as the target's drafts (docs/synth.md, "Draft models").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "synth/model_spec.h"
#include "synth/writer.h"

namespace tandem::synth {

enum class DraftKind {
  small,   // a dense qwen3 of 1 layer: llama.cpp's draft-simple (COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE)
  eagle3,  // llama.cpp's eagle3 architecture: draft-eagle3 (COMMON_SPECULATIVE_TYPE_DRAFT_EAGLE3)
};

// "small" or "eagle3".
const char* draft_kind_name(DraftKind kind);

// Parses "small" or "eagle3"; the error lists both.
Result<DraftKind> parse_draft_kind(const std::string& name);

struct DraftOptions {
  DraftKind kind = DraftKind::small;
  // ggml_type of the weight matrices; -1: the target's most common one when synth can generate
  // it (F32, F16, Q8_0, Q4_K, IQ4_XS), else Q8_0.
  int type = -1;
  // small: layers (0: 1) and hidden size (0: 256, or the target's when that is smaller). eagle3
  // always has one layer and the target's hidden size; setting either for it is an error.
  uint32_t n_layer = 0;
  uint32_t n_embd = 0;
  // eagle3: the three target layers whose inputs the draft reads, each in 0..(target layers - 1);
  // empty: default_target_layers(target layers).
  std::vector<int32_t> target_layers;
  // eagle3: write a token embedding of its own. Without one (the default, as published EAGLE3
  // drafts ship), libllama reads the target's, so a draft context needs the target's context.
  bool own_embedding = false;
  uint64_t seed = 42;
};

// The target layers an EAGLE3 draft reads by default, given the target's layer count: llama.cpp's
// conversion's choice (2, n/2, n-3: MiniMax-M3's 60 layers give 2, 30, 57, the published draft's)
// from 6 layers up, else the first, the middle and the last (2 layers: 0, 1, 1).
std::vector<int32_t> default_target_layers(uint32_t target_n_layer);

// The draft's spec for the target at `target_path`, from the target's header alone (split files
// and header-only files too). Its tokenizer is the target's: every tokenizer.* key is copied, so
// token count, texts, types, BOS/EOS and chat template are the target's. Errors name the target
// and say what is wrong: missing, not a readable GGUF, no tokenizer to copy, a tokenizer that
// disagrees with the embedding's row count, an option that does not fit (e.g. a target layer
// beyond the target's layers).
Result<ModelSpec> draft_spec(const std::string& target_path, const DraftOptions& options);

struct DraftResult {
  SynthResult file;
  ModelSpec spec;  // what was written: architecture, shape, target layers
};

// Writes the draft of `target_path` to `path`, as write_model() writes any model: through
// "<path>.part", renamed into place only when complete, so a failure leaves no file at `path`.
Result<DraftResult> write_draft(const std::string& target_path, const std::string& path, const DraftOptions& options,
                                const SynthOptions& synth_options);

}  // namespace tandem::synth
