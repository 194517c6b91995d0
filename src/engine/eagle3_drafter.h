// An EAGLE3 drafter fed with features the caller captured (engine/eagle3_tap.h), for targets whose
// graph does not record the layer inputs llama.cpp's own EAGLE3 driver reads.
//
// Why not llama.cpp's driver (common/speculative.cpp, common_speculative_impl_draft_eagle3): its
// constructor turns on llama_set_embeddings_layer_inp() on the target context and its process()
// reads llama_get_embeddings_layer_inp() from it, and common_speculative offers no way to hand it
// features from elsewhere; on such a target the first decode aborts. This drafter speaks the same
// protocol to the same draft context over llama.h's calls (llama_encode() with the features as
// embeddings, llama_decode() of token-and-feature pairs, llama-ext.h's pre-norm hidden states),
// so that, given the same features, it proposes the same tokens as llama.cpp's driver
// (tests/engine/eagle3_test.cpp compares them token for token):
//   - the encoder turns each token's features (the taps side by side) into a row g;
//   - the decoder at position P reads the pair (token at P + 1, g at P); the last position of each
//     processed run waits for the token after it (the next batch's first, or the draft's first
//     step, which pairs it with the target's latest sample);
//   - each drafted token's pre-norm hidden state is the g of the next draft step.
// Owned by the Speculator; touched only by the scheduler's decode thread.
#pragma once

#include <memory>
#include <vector>

#include "common.h"
#include "common/status.h"
#include "speculative.h"

struct common_sampler;
struct llama_context;
struct llama_model;
struct llama_sampler;

namespace tandem::engine {

struct Eagle3DrafterOptions {
  int n_seq = 1;                 // sequences (the target's slots)
  int n_max = 8;                 // tokens drafted per step at most (a sequence's n_max may cut it)
  float p_min = 0.0f;            // a draft stops at a token less likely than this (llama.cpp's p_min)
  bool backend_sampling = true;  // the top-k of each draft step on the draft's device (llama.cpp's default)
};

class Eagle3Drafter {
 public:
  // Over `draft` (an eagle3 model's context, borrowed: it must outlive the drafter) for `target`.
  // Errors: the draft does not read 3 target layers, or its features are not the target's width.
  static Result<std::unique_ptr<Eagle3Drafter>> create(llama_context* draft, const llama_model* target,
                                                       const Eagle3DrafterOptions& options);
  ~Eagle3Drafter();
  Eagle3Drafter(const Eagle3Drafter&) = delete;
  Eagle3Drafter& operator=(const Eagle3Drafter&) = delete;

  // The draft request of `seq` (as common_speculative_get_draft_params()): set drafting, n_max,
  // pos0, id_last and result before draft().
  common_speculative_draft_params& params(int seq) { return params_[static_cast<size_t>(seq)]; }

  // The target decoded `batch` (tokens, one sequence each, each sequence's tokens together);
  // `features` holds one row of n_features() floats per token of it, in its order. False when the
  // draft's encode or decode failed.
  bool process(const llama_batch& batch, const float* features);
  // Drafts for every sequence whose params say drafting, into its result; clears drafting.
  void draft();
  // `n_accepted` of the last draft of `seq` were kept: the next draft continues after them.
  void accept(int seq, int n_accepted);

  // The target layers the EAGLE3 model `draft` reads the inputs of, in the order its features
  // put them side by side.
  static std::vector<int32_t> target_layers(const llama_model* draft);

  // Floats per token that process() reads: taps × the target's hidden size.
  int n_features() const { return n_enc_; }

 private:
  struct Seq;
  explicit Eagle3Drafter(llama_context* draft, const Eagle3DrafterOptions& options);
  bool encode(const float* features, int n_tokens);
  void add(llama_token token, llama_pos pos, int seq, const float* g, bool logits);
  int seed(std::vector<bool>* drafting);
  bool extend(std::vector<bool>* drafting, int* n_drafting, int step);
  void finish();

  llama_context* ctx_;
  Eagle3DrafterOptions options_;
  int n_enc_ = 0, n_dec_ = 0;
  llama_batch batch_;             // tokens from llama_batch_init; embd is pair_embd_
  std::vector<float> pair_embd_;  // [n_batch][n_dec] the g half of each pair
  std::vector<float> g_;          // the encoder's rows of the last process()
  std::vector<common_speculative_draft_params> params_;
  std::vector<Seq> seqs_;
  std::vector<common_sampler*> samplers_;
  std::vector<llama_sampler*> backend_chains_;
};

}  // namespace tandem::engine
