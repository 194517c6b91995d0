// One parallel sequence of the scheduler: its KV cache stream, what that stream holds, and the job
// running on it. Private to the engine; touched only by the scheduler's decode thread.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "engine/job.h"
#include "engine/prompt_cache.h"
#include "engine/text_stream.h"

struct llama_context;
struct llama_batch;

namespace tandem::engine {

class Speculator;

class Slot {
 public:
  Slot(int seq_id, int n_ctx) : seq_id_(seq_id), n_ctx_(n_ctx) {}

  int seq_id() const { return seq_id_; }
  bool busy() const { return job_ != nullptr; }
  bool generating() const { return job_ != nullptr && next_ >= 0; }
  const std::string& job_id() const { return job_->id; }
  // Tokens in common between what the slot's KV stream holds and `prompt`.
  size_t common_prefix(const std::vector<llama_token>& prompt) const;
  // What the slot's KV stream holds (prompt and generated tokens), in position order.
  const std::vector<llama_token>& held() const { return cache_; }
  // The stream's state as llama.cpp serialises one sequence, named `key`, saved through `shares`
  // (the parts other nodes keep stay there). Size 0 when the slot holds nothing or the save fails
  // (the reason in `why`, when given); nothing is then left on the other nodes.
  SavedState save_state(llama_context* ctx, uint64_t key, StateShares& shares, std::string* why = nullptr) const;
  // Replaces what the free slot's stream holds by `state`, a sequence that held `tokens`, restored
  // through `shares`. False, with the stream left empty, when llama.cpp refuses the state or a node
  // no longer holds its part (the reason in `why`). The nodes' parts stay; the caller drops them.
  bool restore_state(llama_context* ctx, std::vector<llama_token> tokens, const SavedState& state, StateShares& shares,
                     std::string* why = nullptr);
  // Whether what the stream holds now was offered to the prompt cache (kept or not) since it last
  // changed.
  bool saved() const { return saved_; }
  void set_saved() { saved_ = true; }

  // Takes the job, keeping the longest cached prefix of its prompt in the KV stream (at least
  // one prompt token is always evaluated again, for its logits), and tells the job's client so
  // (a started event with the prompt's usage).
  // With a speculator, its draft stream is cut to what the slot keeps.
  void start(std::unique_ptr<Job> job, llama_context* ctx, Speculator* spec);

  // When the slot generates freely (no forced tokens left) and has room: asks `spec` for a draft of
  // at most `n_max` tokens after its last sampled one. True when asked (Speculator::draft_all()
  // fills it).
  bool want_draft(Speculator& spec, int n_max);
  // Tokens this slot puts into the next batch when it generates: the last sampled one and its draft.
  int generating_tokens() const { return generating() ? 1 + static_cast<int>(draft_.size()) : 0; }
  // The pending step carries a draft of this slot's.
  bool checking_draft() const { return !draft_.empty(); }

  // Adds this slot's next tokens to `batch`: the last sampled token and its draft, or up to `budget`
  // prompt tokens. Returns how many were added.
  int add_to_batch(llama_batch& batch, int budget);

  // After a successful decode: samples when this slot's logits were in the batch (checking its
  // draft: the tokens kept are the ones decoding without it gives), emits the events, and frees the
  // slot when the job ended. Returns how many tokens were generated.
  int after_decode(llama_context* ctx, Speculator* spec);

  // Ends the job with `error` (a cancelled one too) and frees the slot. The KV stream keeps what
  // was decoded, for prefix reuse.
  void fail(const Status& error);

  // Forgets the KV stream (after a failed decode left it in an unknown state).
  void drop_cache(llama_context* ctx, Speculator* spec);

 private:
  // Takes `token`, sampled (and accepted by the sampler) from the logits at batch index `idx` when
  // the stream held `held` tokens: its events, and the end of the job. False when the job ended.
  bool take_token(llama_context* ctx, int idx, llama_token token, size_t held);
  // Benchmarks' synthetic acceptance (Speculator::synth_probs()): which of the pending draft to
  // keep, by chance rather than by the model's samples.
  std::vector<llama_token> keep_by_chance(llama_context* ctx, const std::vector<double>& probs);
  void finish(const char* reason);
  void emit(const std::string& ready, bool final);

  const int seq_id_;
  const int n_ctx_;
  std::vector<llama_token> cache_;  // tokens whose K/V are in this sequence, in position order
  std::unique_ptr<Job> job_;        // null when free
  TextStream text_;
  int logits_index_ = -1;           // batch index of this slot's logits in the pending decode
  llama_token next_ = -1;           // sampled and not yet decoded; -1 while the prompt runs
  std::vector<llama_token> draft_;  // proposed after next_ for the pending step
  std::vector<int> draft_idxs_;     // batch indices of next_'s and each draft token's logits
  int n_generated_ = 0;
  std::vector<llama_token> generated_;  // only when the job asked for return_tokens
  std::vector<TokenLogprob> logprobs_;  // only when the job asked for logprobs: not yet sent
  int n_cached_ = 0;                    // prompt tokens reused from the cache
  bool saved_ = false;                  // see saved()
  std::mt19937 chance_;                 // keep_by_chance()'s draws, seeded by the job's seed
};

}  // namespace tandem::engine
