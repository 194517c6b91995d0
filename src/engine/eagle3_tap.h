// The target's hidden states an EAGLE3 draft reads, captured through the graph's evaluation
// callback (llama_context_params::cb_eval) instead of llama.cpp's own route.
//
// llama.cpp's EAGLE3 driver (common/speculative.cpp) turns on llama_set_embeddings_layer_inp()
// for the layers the draft taps and reads llama_get_embeddings_layer_inp() after each target
// decode; both need the target's graph to record those layers' inputs (llm_graph_result::
// t_layer_inp), and a graph that does not (the pinned minimax-m3's) aborts the process in its
// first decode ("layer input tensor is null"). The graphs name every layer's output, though, and
// the input of layer il is the output of layer il - 1 ("l_out-<il-1>"; layer 0's is "embd"): the
// tap asks ggml's scheduler to stop after those nodes and copies them out, with no change to
// llama.cpp. The cost is the scheduler's: with a callback set it computes every split as views
// of its graph, cut at the observed nodes, and waits for the device after every piece; a view has
// no graph id, so a worker's split is sent whole over ggml-rpc each step instead of recomputed
// (docs/serve.md, "EAGLE3 on MiniMax-M3: the tap", has the figures).
//
// Used on the scheduler's decode thread only: the callback runs inside llama_decode() on the
// thread that called it, and take() after it returns.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

struct ggml_tensor;
struct llama_context_params;
struct llama_model;

namespace tandem::engine {

// Whether the pinned graph of architecture `arch` records its layer inputs, which llama.cpp's own
// EAGLE3 route reads; a draft on any other target needs an Eagle3Tap.
bool graph_records_layer_inputs(const std::string& arch);

// The name the pinned graphs give the input of layer `il` (0 <= il < the target's layer count):
// "embd" for layer 0 (the token embedding), else "l_out-<il - 1>".
std::string layer_input_name(int il);

struct Eagle3TapStats {
  uint64_t decodes = 0;       // take() calls that returned features
  uint64_t multi_ubatch = 0;  // of those, decodes llama.cpp split into several micro-batches
  uint64_t observed = 0;      // tensors copied out
  uint64_t bytes = 0;         // bytes copied out (from whichever device computed them)
  uint64_t callback_ns = 0;   // time inside the callback, copies included
};

class Eagle3Tap {
 public:
  Eagle3Tap() = default;
  Eagle3Tap(const Eagle3Tap&) = delete;
  Eagle3Tap& operator=(const Eagle3Tap&) = delete;

  // A tap for the draft model at `draft_model` on `target` when it needs one: an EAGLE3 draft (its
  // file's architecture) on a target whose graph does not record the layer inputs, or on any
  // target with TANDEM_EAGLE3_TAP=1 in the environment (measurement: the tapped route against
  // llama.cpp's own on the same target). Null otherwise, and when the draft's header cannot be read
  // (loading it reports why).
  static std::unique_ptr<Eagle3Tap> for_draft(const std::string& draft_model, const llama_model* target);

  // Sets `cp`'s evaluation callback to this tap. Call before llama_init_from_model(); the tap must
  // outlive every decode of that context. Until watch() it observes nothing (but ggml's scheduler
  // already takes its callback path: the per-split wait).
  void install(llama_context_params* cp);

  // Captures the inputs of `layers` (each in 0..n_layer-1; repeats allowed) of a target with
  // `n_layer` layers of `n_embd` floats; drops whatever was captured before. Errors name the layer
  // out of range (layer n_layer, the final hidden state, is cut to the output rows in the graph).
  Status watch(const std::vector<int32_t>& layers, int n_layer, int n_embd);

  // The features of the last decode of `n_tokens` tokens, as EAGLE3's encoder takes them: one row
  // per token of `n_taps * n_embd` floats, the taps side by side in watch()'s order; rows in the
  // order llama.cpp computed the tokens (its micro-batches in turn, as its own route gives them).
  // Clears what was captured. Errors when a tapped tensor was not seen in the last micro-batch
  // (the graph's names changed) or fewer than `n_tokens` rows were captured.
  Status take(int n_tokens, std::vector<float>* features);

  int n_taps() const { return static_cast<int>(layers_.size()); }
  int n_embd() const { return n_embd_; }
  const Eagle3TapStats& stats() const { return stats_; }

  // ggml_backend_sched_eval_callback: `ask` asks whether `t` is wanted; then (ask false) `t` is
  // computed and is copied. Always true when not asking (false would stop the split).
  static bool on_eval(ggml_tensor* t, bool ask, void* tap);

 private:
  int wanted(const ggml_tensor* t) const;  // index into names_, or -1
  void observe(ggml_tensor* t, int name);

  // Set by watch().
  std::vector<int32_t> layers_;
  std::vector<std::string> names_;  // distinct tensor names
  std::vector<int> name_of_tap_;    // layers_[k]'s index into names_
  int n_embd_ = 0;

  // Captured since the last take(): rows_[name] holds [rows][n_embd] floats, micro-batches in turn.
  std::vector<std::vector<float>> rows_;
  std::vector<bool> seen_;  // names seen in the current micro-batch
  int64_t ubatch_first_ = 0, ubatch_rows_ = 0;
  int64_t ubatches_ = 0;
  bool wrong_shape_ = false;
  Eagle3TapStats stats_;
};

}  // namespace tandem::engine
