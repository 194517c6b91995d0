// Tiny targets and their EAGLE3 drafts for the tap's and the drafter's tests: written with synth,
// loaded on the CPU as the scheduler's tests load theirs, contexts as the scheduler makes them.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "engine/model_loader.h"
#include "ggml.h"
#include "llama.h"
#include "synth/draft.h"
#include "synth/presets.h"
#include "synth/writer.h"

namespace tandem::engine::testing {

struct ContextDeleter {
  void operator()(llama_context* c) const { llama_free(c); }
};
using ContextPtr = std::unique_ptr<llama_context, ContextDeleter>;

struct Eagle3Pair {
  std::string target, draft;
  ModelPtr model;  // the target, loaded
};

// A target of `preset` with `n_layer` layers (IQ4_XS) and its EAGLE3 draft (the default taps for
// that many layers; the target's embedding and output unless `own_embedding`), in `dir`.
inline Eagle3Pair write_eagle3_pair(const std::string& dir, const std::string& preset, uint32_t n_layer,
                                    bool own_embedding = false) {
  Eagle3Pair p;
  const std::string name = dir + "/" + preset + "-" + std::to_string(n_layer);
  p.target = name + ".gguf";
  p.draft = name + "-eagle3.gguf";
  synth::ModelSpec spec = synth::preset(preset).value();
  spec.type = GGML_TYPE_IQ4_XS;
  spec.n_layer = n_layer;
  EXPECT_TRUE(synth::write_model(spec, p.target, {}).is_ok());
  synth::DraftOptions d;
  d.kind = synth::DraftKind::eagle3;
  d.own_embedding = own_embedding;
  EXPECT_TRUE(synth::write_draft(p.target, p.draft, d, {}).is_ok());
  LoadOptions lo;
  lo.model = p.target;
  // File-layout weights: results independent of the batch (docs/engine-protocol.md, exactness).
  lo.placement.cpu_weight_repack = false;
  auto m = load_model(lo);
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  if (m.is_ok()) p.model = std::move(m.value());
  return p;
}

// The scheduler's context parameters: per-sequence KV streams, flash attention, one thread.
inline llama_context_params scheduler_like_params(int n_seq, int n_batch = 64) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512u * static_cast<uint32_t>(n_seq);
  cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(n_batch);
  cp.n_seq_max = static_cast<uint32_t>(n_seq);
  cp.kv_unified = false;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
  cp.n_threads = cp.n_threads_batch = 1;
  cp.no_perf = true;
  return cp;
}

// The most likely token at output `i` of the last decode.
inline llama_token argmax(llama_context* ctx, int i) {
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
  const float* logits = llama_get_logits_ith(ctx, i);
  int best = 0;
  for (int t = 1; t < n_vocab; ++t) best = logits[t] > logits[best] ? t : best;
  return best;
}

}  // namespace tandem::engine::testing
