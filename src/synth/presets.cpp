#include "synth/presets.h"

#include <algorithm>
#include <cctype>

#include "ggml.h"

namespace tandem::synth {
namespace {

// MiniMax-M3 as released (config.json of MiniMaxM3SparseForCausalLM; see docs/synth.md).
ModelSpec minimax_m3_real() {
  ModelSpec s;
  s.arch = "minimax-m3";
  s.name = "MiniMax-M3 (synthetic)";
  s.n_layer = 60;
  s.n_layer_dense_lead = 3;
  s.n_embd = 6144;
  s.n_head = 64;
  s.n_head_kv = 4;
  s.head_dim = 128;
  s.n_rot = 64;
  s.n_ff = 12288;
  s.n_ff_exp = 3072;
  s.n_expert = 128;
  s.n_expert_used = 4;
  s.n_expert_shared = 1;
  s.n_ctx_train = 1048576;
  s.indexer_head_size = 128;
  s.indexer_top_k = 16;
  s.indexer_block_size = 128;
  s.indexer_local_blocks = 1;
  s.rope_theta = 5e6f;
  s.rms_eps = 1e-6f;
  s.expert_weights_scale = 2.0f;
  s.expert_weights_norm = true;
  s.type = GGML_TYPE_IQ4_XS;
  // No MiniMax vocabulary ships with llama.cpp: Qwen2's BPE tokenizer, padded to M3's 200064 rows.
  s.vocab = "ggml-vocab-qwen2.gguf";
  s.n_vocab = 200064;
  s.chat_template = "MiniMax-M3.jinja";
  return s;
}

ModelSpec tiny() {
  ModelSpec s;  // the defaults of ModelSpec are the tiny minimax-m3
  s.name = "tandem tiny minimax-m3";
  // A byte-level BPE tokenizer, like the real M3's: SPM's word marks cannot express the chat
  // template's generation prompt to a grammar, so response_format and tools failed on it.
  // DeepSeek-Coder's 32256 tokens are the fewest of the BPE vocabularies in llama.cpp's models/:
  // the file stays at ~13 MB (Qwen2's 151936 would make it ~53 MB, GPT-2's 50257 ~19 MB, and the
  // wider output layer makes near-ties of random logits, and so split-versus-local differences
  // in greedy tokens, likelier).
  s.vocab = "ggml-vocab-deepseek-coder.gguf";
  s.n_expert = 4;
  s.indexer_block_size = 32;
  s.indexer_top_k = 2;
  s.chat_template = "MiniMax-M3.jinja";
  return s;
}

ModelSpec tiny_qwen3moe() {
  ModelSpec s;
  s.arch = "qwen3moe";
  s.name = "tandem tiny qwen3moe";
  s.n_layer = 2;
  s.n_layer_dense_lead = 0;
  s.n_rot = s.head_dim;
  s.n_expert = 4;
  s.n_expert_shared = 0;
  s.chat_template = "Qwen-Qwen3-0.6B.jinja";
  return s;
}

ModelSpec tiny_glm4moe() {
  ModelSpec s;
  s.arch = "glm4moe";
  s.name = "tandem tiny glm4moe";
  s.n_layer = 4;
  s.n_layer_dense_lead = 1;
  s.n_expert = 8;
  s.n_expert_used = 4;  // more than half the experts every token: the shape of many used experts
  s.n_expert_shared = 1;
  s.expert_weights_scale = 2.5f;
  s.chat_template = "GLM-4.6.jinja";
  return s;
}

// GLM-4.5 as released (config.json of Glm4MoeForCausalLM): 92 layers, the first 3 dense; 16 routed
// experts instead of 160, so that a token reads the real model's bytes from a file that fits.
ModelSpec glm_proxy() {
  ModelSpec s;
  s.arch = "glm4moe";
  s.name = "GLM-4.5 proxy, 16 experts (synthetic)";
  s.n_layer = 92;
  s.n_layer_dense_lead = 3;
  s.n_embd = 5120;
  s.n_head = 96;
  s.n_head_kv = 8;
  s.head_dim = 128;
  s.n_rot = 64;  // partial rotary 0.5
  s.n_ff = 12288;
  s.n_ff_exp = 1536;
  s.n_expert = 16;
  s.n_expert_used = 8;
  s.n_expert_shared = 1;
  s.n_ctx_train = 131072;
  s.rope_theta = 1e6f;
  s.rms_eps = 1e-5f;
  s.expert_weights_scale = 2.5f;
  s.expert_weights_norm = true;
  s.type = GGML_TYPE_IQ4_XS;
  s.vocab = "ggml-vocab-qwen2.gguf";  // no GLM vocabulary ships with llama.cpp: 151936 rows, GLM's 151552
  s.chat_template = "GLM-4.6.jinja";
  return s;
}

// Qwen3-235B-A22B as released: 94 layers, 8 of 128 experts per token; 16 routed experts here.
ModelSpec qwen3_proxy() {
  ModelSpec s;
  s.arch = "qwen3moe";
  s.name = "Qwen3-235B-A22B proxy, 16 experts (synthetic)";
  s.n_layer = 94;
  s.n_layer_dense_lead = 0;
  s.n_embd = 4096;
  s.n_head = 64;
  s.n_head_kv = 4;
  s.head_dim = 128;
  s.n_rot = 128;
  s.n_ff_exp = 1536;
  s.n_expert = 16;
  s.n_expert_used = 8;
  s.n_expert_shared = 0;
  s.n_ctx_train = 262144;
  s.rope_theta = 1e6f;
  s.rms_eps = 1e-6f;
  s.type = GGML_TYPE_IQ4_XS;
  s.vocab = "ggml-vocab-qwen2.gguf";  // Qwen's own 151936 tokens
  s.chat_template = "Qwen-Qwen3-0.6B.jinja";
  return s;
}

// MiniMax-M3's layers exactly as released, every one of the 128 routed experts kept, but 7 layers
// instead of 60: the leading dense kind once and the MoE kind 6 times. One MoE layer is 3.9 GB as
// IQ4_XS, so the file is 25.2 GB (23.5 GiB; 8 layers would be 29.2 GB), which fits the lent GPU's
// 64 GB disk beside a split's worker cache of half of it. m3-proxy keeps the real depth and what
// one token reads; this one keeps what a batch of k tokens reads: the union of their experts,
// which 16 experts would cap at 16 per layer.
ModelSpec m3_experts_proxy() {
  ModelSpec s = minimax_m3_real();
  s.name = "MiniMax-M3 proxy, 128 experts, 7 layers (synthetic)";
  s.n_layer = 7;
  s.n_layer_dense_lead = 1;
  return s;
}

}  // namespace

std::vector<PresetInfo> presets() {
  return {
      {"tiny",
       "minimax-m3, 4 layers, hidden 256, 4 experts (2 used + 1 shared), Q4_K, a BPE tokenizer, ~13 MB: tests and the "
       "demo"},
      {"tiny-qwen3moe", "qwen3moe, 2 layers, hidden 256, 4 experts (2 used), Q4_K"},
      {"tiny-glm4moe",
       "glm4moe, 4 layers (1 dense), hidden 256, 8 experts (4 used + 1 shared), attention biases, Q4_K"},
      {"m3-proxy",
       "MiniMax-M3's real per-token shapes with 16 routed experts instead of 128, IQ4_XS, ~34 GB: GPU benchmarks"},
      {"m3-experts-proxy",
       "MiniMax-M3's real layers with all 128 routed experts, 7 of them (1 dense + 6 MoE), IQ4_XS, ~25 GB: GPU "
       "benchmarks of what a batch of tokens reads (speculative decoding's verify steps)"},
      {"m3", "the real MiniMax-M3 (~428B parameters, 128 experts), IQ4_XS; use with --header-only"},
      {"qwen3-proxy",
       "Qwen3-235B-A22B's real per-token shapes (94 layers, 8 experts used) with 16 routed experts instead of 128, "
       "IQ4_XS, ~19 GB: GPU benchmarks of a deep model"},
      {"glm-proxy",
       "GLM-4.5's real per-token shapes (92 layers, 8 experts used + 1 shared) with 16 routed experts instead of "
       "160, IQ4_XS, ~27 GB: GPU benchmarks of a deep model with many experts per token"},
  };
}

Result<ModelSpec> preset(const std::string& name) {
  if (name == "tiny") return tiny();
  if (name == "tiny-qwen3moe") return tiny_qwen3moe();
  if (name == "tiny-glm4moe") return tiny_glm4moe();
  if (name == "qwen3-proxy") return qwen3_proxy();
  if (name == "glm-proxy") return glm_proxy();
  if (name == "m3") return minimax_m3_real();
  if (name == "m3-proxy") {
    ModelSpec s = minimax_m3_real();
    s.name = "MiniMax-M3 proxy, 16 experts (synthetic)";
    s.n_expert = 16;
    return s;
  }
  if (name == "m3-experts-proxy") return m3_experts_proxy();
  std::string known;
  for (const auto& p : presets()) known += (known.empty() ? "" : ", ") + p.name;
  return Status::invalid_argument("unknown preset '" + name + "' (known: " + known + ")");
}

Result<int> parse_weight_type(const std::string& name) {
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  for (ggml_type t : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_IQ4_XS}) {
    std::string n = ggml_type_name(t);
    std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::toupper(c); });
    if (n == upper) return static_cast<int>(t);
  }
  return Status::invalid_argument("unknown weight type '" + name + "' (use F32, F16, Q8_0, Q4_K or IQ4_XS)");
}

}  // namespace tandem::synth
