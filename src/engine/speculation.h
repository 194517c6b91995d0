// Speculative decoding for the scheduler's slots, over llama.cpp's common speculative code
// (common/speculative.h): a drafter proposes up to `draft_max` tokens after a slot's last sampled
// one, the target checks them all in one decode step (a split carries it as one step), and the
// slot keeps the tokens the target would have produced, which are the same as without speculation
// (engine/slot.h). Modes: n-gram drafts from the sequence's own tokens (no model), or a draft
// model on the head (an ordinary small model of the target's vocabulary, or an EAGLE3 draft, which
// reads the target's hidden states of the layers it taps).
//
// A draft model has a context of its own that mirrors the target's KV streams: every batch the
// target decodes is decoded there too (process()), and whatever the scheduler cuts from a target
// stream it cuts there (cut()). Owned by the scheduler; touched only by its decode thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/launch.h"
#include "engine/protocol.h"

struct llama_batch;
struct llama_context;
struct llama_model;
struct common_speculative;
struct common_speculative_draft_params;

namespace tandem::engine {

class Eagle3Drafter;
class Eagle3Tap;

struct SpeculationOptions {
  std::string mode = "off";  // "off", "ngram" or "draft"
  std::string draft_model;   // GGUF of the draft ("draft")
  int draft_max = 8;         // tokens drafted per step at most
  // Benchmarks only, > 0: llama.cpp's synthetic acceptance. Drafted tokens are kept at random, at
  // rates that make a step yield this many tokens on average (in [1, draft_max + 1]); the text is
  // then not the model's.
  double synth_len = 0;
  int kv_type = 1;  // ggml_type of the draft's KV cache (1: F16); the scheduler gives the model's
};

class Speculator {
 public:
  // Null for mode "off". Loads the draft model on the head's own devices (its first GPU, else the
  // CPU; never a worker) with a context of the target's size and `n_seq` streams. Errors name the
  // file and the reason (missing, not a GGUF, a vocabulary other than the target's, an EAGLE3
  // draft whose target the pinned llama.cpp cannot tap and no `tap` was given).
  // `tap`: installed in `target` when it was made (Eagle3Tap::for_draft()); with it an EAGLE3 draft
  // reads the target's hidden states from the tap and drafts through tandem's Eagle3Drafter
  // instead of llama.cpp's driver.
  static Result<std::unique_ptr<Speculator>> create(const SpeculationOptions& options, llama_context* target, int n_seq,
                                                    std::unique_ptr<Eagle3Tap> tap = nullptr);
  ~Speculator();
  Speculator(const Speculator&) = delete;
  Speculator& operator=(const Speculator&) = delete;

  // Sets sequence `seq` up for drafts of at most `n_max` tokens after `last` at position `pos`, the
  // sequence holding `*held` before it (borrowed until draft_all(): no copy of a long context each
  // step); the draft lands in `*out` at the next draft_all().
  void want_draft(int seq, const std::vector<int>* held, int last, int pos, int n_max, std::vector<int>* out);
  // Drafts for every sequence set up since the last call, in one pass of the drafter.
  void draft_all();
  // After every decode of the target (prompts included): the draft model decodes the same batch.
  // False when the draft model's decode failed (the drafts are then off for this engine's life).
  bool process(const llama_batch& batch);
  // `n_accepted` of the last draft of `seq` were kept.
  void accept(int seq, int n_accepted);
  // Cuts the draft model's stream of `seq` from `pos` on, as the target's was: the two hold the
  // same positions (a stream that would not end at `pos` is emptied: llama.cpp continues an
  // empty stream anywhere).
  void cut(int seq, int pos);
  // The target's stream of `seq` was replaced by a restored state holding `tokens`: the draft's
  // stream reads them too (an ordinary draft model; an EAGLE3 draft, which would need the target's
  // hidden states of each, starts empty at the restored end).
  void refill(int seq, const std::vector<int>& tokens);
  // False once the draft model's decode failed: no more drafts for this engine's life.
  bool working() const { return !failed_; }
  // A new request on `seq` whose stream holds `held` (the kept prefix): the drafter's per-sequence
  // state restarts from there.
  void begin(int seq, const std::vector<int>& held);

  SpeculationStats stats() const { return stats_; }
  void count_step(int drafted, int accepted);
  // A decode step that checked drafts took `seconds` (the verify cost in /health).
  void count_verify_time(double seconds) { stats_.verify_seconds += seconds; }
  // Synthetic acceptance (SpeculationOptions::synth_len): the chance that drafted token i is kept
  // once the ones before it were. Empty: the target decides, as always outside benchmarks.
  const std::vector<double>& synth_probs() const { return synth_probs_; }

 private:
  Speculator(SpeculationOptions options, int n_seq);
  // Loads options_.draft_model on the head with its context beside `target`'s (see create()).
  Status load_draft(llama_context* target, int n_seq);
  // The tapped route's drafter over the loaded EAGLE3 draft (tap_ set).
  Status start_tapped_eagle3(llama_context* target, int n_seq);
  // The draft request of `seq`, from whichever drafter runs.
  common_speculative_draft_params& draft_params(int seq);
  // process() on the tapped route: the tap's rows of `batch` to the drafter.
  bool process_tapped(const llama_batch& batch);

  SpeculationOptions options_;
  struct Draft;
  std::unique_ptr<Draft> draft_;  // the draft model and its context ("draft" mode)
  common_speculative* spec_ = nullptr;
  // The tapped route (an EAGLE3 draft on a target whose graph does not record the hidden states it
  // reads): the tap, tandem's drafter in place of spec_, and the tap's rows of the last step.
  std::unique_ptr<Eagle3Tap> tap_;
  std::unique_ptr<Eagle3Drafter> eagle3_;
  std::vector<float> features_;
  int n_seq_;
  bool failed_ = false;
  SpeculationStats stats_;
  std::vector<double> synth_probs_;
};

}  // namespace tandem::engine
