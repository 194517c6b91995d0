#include <cmath>

#include "ggml.h"
#include "synth/model_spec.h"

namespace tandem::synth {
namespace {

// The largest type not above `wanted` whose block divides a row of `row_len` elements, like
// llama.cpp's quantizer falls back for tensors with odd row sizes.
int fitting_type(int wanted, int64_t row_len) {
  const auto fits = [&](ggml_type t) { return row_len % ggml_blck_size(t) == 0; };
  if (fits(static_cast<ggml_type>(wanted))) return wanted;
  if (fits(GGML_TYPE_Q8_0) && wanted != GGML_TYPE_F32 && wanted != GGML_TYPE_F16) return GGML_TYPE_Q8_0;
  return GGML_TYPE_F16;
}

class Table {
 public:
  explicit Table(const ModelSpec& spec) : spec_(spec) {}

  // A weight matrix {cols, rows, experts} in the model's type, values ~ N(0, gain / sqrt(cols)).
  void matrix(const std::string& name, int64_t cols, int64_t rows, int64_t experts = 1, float gain = 1.0f) {
    TensorSpec t;
    t.name = name;
    t.ne[0] = cols;
    t.ne[1] = rows;
    t.ne[2] = experts;
    t.type = fitting_type(spec_.type, cols);
    t.scale = gain / std::sqrt(static_cast<float>(cols));
    out.push_back(t);
  }
  // A full-precision tensor (norms, router, biases, indexer), as real conversions keep them.
  void f32(const std::string& name, int64_t cols, int64_t rows, Fill fill, float scale = 0.0f) {
    TensorSpec t;
    t.name = name;
    t.ne[0] = cols;
    t.ne[1] = rows;
    t.type = GGML_TYPE_F32;
    t.fill = fill;
    t.scale = scale;
    out.push_back(t);
  }
  std::vector<TensorSpec> out;

 private:
  const ModelSpec& spec_;
};

std::string blk(uint32_t i, const char* rest) { return "blk." + std::to_string(i) + "." + rest; }

// Every architecture's attention has per-head Q/K norms; GLM's also has Q/K/V biases (GLM-4.5's
// `attention_bias`) and names its pre-FFN norm `post_attention_norm`.
void attention(Table& t, const ModelSpec& s, uint32_t i) {
  const int64_t e = s.n_embd, q = int64_t{s.head_dim} * s.n_head, kv = int64_t{s.head_dim} * s.n_head_kv;
  const bool glm = s.arch == "glm4moe";
  t.f32(blk(i, "attn_norm.weight"), e, 1, Fill::ones);
  t.matrix(blk(i, "attn_q.weight"), e, q);
  t.matrix(blk(i, "attn_k.weight"), e, kv);
  t.matrix(blk(i, "attn_v.weight"), e, kv);
  if (glm) {
    t.f32(blk(i, "attn_q.bias"), q, 1, Fill::random, 0.02f);
    t.f32(blk(i, "attn_k.bias"), kv, 1, Fill::random, 0.02f);
    t.f32(blk(i, "attn_v.bias"), kv, 1, Fill::random, 0.02f);
  }
  t.matrix(blk(i, "attn_output.weight"), q, e);
  t.f32(blk(i, "attn_q_norm.weight"), s.head_dim, 1, Fill::ones);
  t.f32(blk(i, "attn_k_norm.weight"), s.head_dim, 1, Fill::ones);
  t.f32(blk(i, glm ? "post_attention_norm.weight" : "ffn_norm.weight"), e, 1, Fill::ones);
}

void dense_ffn(Table& t, const ModelSpec& s, uint32_t i) {
  t.matrix(blk(i, "ffn_gate.weight"), s.n_embd, s.n_ff);
  t.matrix(blk(i, "ffn_down.weight"), s.n_ff, s.n_embd);
  t.matrix(blk(i, "ffn_up.weight"), s.n_embd, s.n_ff);
}

void routed_experts(Table& t, const ModelSpec& s, uint32_t i) {
  const int64_t e = s.n_embd, f = s.n_ff_exp, x = s.n_expert;
  t.f32(blk(i, "ffn_gate_inp.weight"), e, x, Fill::random, 1.0f / std::sqrt(static_cast<float>(e)));
  t.matrix(blk(i, "ffn_gate_exps.weight"), e, f, x);
  t.matrix(blk(i, "ffn_down_exps.weight"), f, e, x);
  t.matrix(blk(i, "ffn_up_exps.weight"), e, f, x);
}

// The routed experts with their routing bias (sigmoid gating) and the shared experts, if any.
void biased_experts_and_shared(Table& t, const ModelSpec& s, uint32_t i) {
  const int64_t e = s.n_embd;
  routed_experts(t, s, i);
  t.f32(blk(i, "exp_probs_b.bias"), s.n_expert, 1, Fill::zeros);
  if (s.n_expert_shared == 0) return;
  const int64_t sh = int64_t{s.n_ff_exp} * s.n_expert_shared;
  t.matrix(blk(i, "ffn_gate_shexp.weight"), e, sh);
  t.matrix(blk(i, "ffn_down_shexp.weight"), sh, e);
  t.matrix(blk(i, "ffn_up_shexp.weight"), e, sh);
}

void minimax_m3(Table& t, const ModelSpec& s) {
  const int64_t e = s.n_embd;
  for (uint32_t i = 0; i < s.n_layer; ++i) {
    attention(t, s, i);
    if (i < s.n_layer_dense_lead) {
      dense_ffn(t, s, i);
      continue;
    }
    biased_experts_and_shared(t, s, i);
    // The sparse-attention indexer stays in F32, as llama.cpp's conversion and quantizer keep it.
    const float sd = 1.0f / std::sqrt(static_cast<float>(e));
    t.f32(blk(i, "indexer.q_proj.weight"), e, int64_t{s.n_head_kv} * s.indexer_head_size, Fill::random, sd);
    t.f32(blk(i, "indexer.k_proj.weight"), e, s.indexer_head_size, Fill::random, sd);
    t.f32(blk(i, "indexer.q_norm.weight"), s.indexer_head_size, 1, Fill::ones);
    t.f32(blk(i, "indexer.k_norm.weight"), s.indexer_head_size, 1, Fill::ones);
  }
}

void qwen3moe(Table& t, const ModelSpec& s) {
  for (uint32_t i = 0; i < s.n_layer; ++i) {
    attention(t, s, i);
    routed_experts(t, s, i);
  }
}

// A dense model (the small draft): attention and a dense FFN in every layer.
void qwen3(Table& t, const ModelSpec& s) {
  for (uint32_t i = 0; i < s.n_layer; ++i) {
    attention(t, s, i);
    dense_ffn(t, s, i);
  }
}

// llama.cpp's eagle3 (src/models/eagle3.cpp): `fc` fuses the three target layers' hidden states
// into one; the single decoder layer's attention reads the normed token embedding and the normed
// fused state side by side (2 x hidden wide), `attn_norm_2` being the latter's norm.
void eagle3(Table& t, const ModelSpec& s) {
  const int64_t e = s.n_embd, q = int64_t{s.head_dim} * s.n_head, kv = int64_t{s.head_dim} * s.n_head_kv;
  t.matrix("fc.weight", int64_t{s.target_embd} * static_cast<int64_t>(s.target_layers.size()), e);
  t.f32(blk(0, "attn_norm.weight"), e, 1, Fill::ones);
  t.f32(blk(0, "attn_norm_2.weight"), e, 1, Fill::ones);
  t.matrix(blk(0, "attn_q.weight"), 2 * e, q);
  t.matrix(blk(0, "attn_k.weight"), 2 * e, kv);
  t.matrix(blk(0, "attn_v.weight"), 2 * e, kv);
  t.matrix(blk(0, "attn_output.weight"), q, e);
  t.f32(blk(0, "ffn_norm.weight"), e, 1, Fill::ones);
  dense_ffn(t, s, 0);
}

void glm4moe(Table& t, const ModelSpec& s) {
  for (uint32_t i = 0; i < s.n_layer; ++i) {
    attention(t, s, i);
    if (i < s.n_layer_dense_lead)
      dense_ffn(t, s, i);
    else
      biased_experts_and_shared(t, s, i);
  }
}

bool is_moe(const std::string& arch) { return arch == "minimax-m3" || arch == "qwen3moe" || arch == "glm4moe"; }

// The drafts' own rules: whole-head rotation, a dense FFN, and eagle3's single layer and taps.
Status validate_dense(const ModelSpec& s) {
  auto bad = [](const std::string& m) { return Status::invalid_argument(m); };
  if (s.n_rot != s.head_dim) return bad(s.arch + " rotates whole heads: rotary dimensions must equal the head size");
  if (s.n_ff == 0 || s.n_ff % 32 != 0)
    return bad("dense FFN size must be a positive multiple of 32, got " + std::to_string(s.n_ff));
  if (s.arch != "eagle3") return Status::ok();
  if (s.n_layer != 1) return bad("eagle3 has exactly one decoder layer, got " + std::to_string(s.n_layer));
  if (s.target_layers.size() != 3)
    return bad("eagle3 reads exactly 3 target layers, got " + std::to_string(s.target_layers.size()));
  for (int32_t l : s.target_layers)
    if (l < 0) return bad("eagle3 target layers must not be negative, got " + std::to_string(l));
  if (s.target_embd == 0 || s.target_embd % 32 != 0)
    return bad("eagle3 target hidden size must be a positive multiple of 32, got " + std::to_string(s.target_embd));
  if (s.tie_embeddings) return bad("eagle3 has an output head of its own: it cannot tie it to the embedding");
  return Status::ok();
}

}  // namespace

Status validate_spec(const ModelSpec& s) {
  auto bad = [](const std::string& m) { return Status::invalid_argument(m); };
  if (!is_moe(s.arch) && s.arch != "qwen3" && s.arch != "eagle3")
    return bad("unknown architecture '" + s.arch +
               "' (supported: minimax-m3, qwen3moe, glm4moe; drafts: qwen3, eagle3)");
  if (!generatable_type(s.type))
    return bad("weight type " + std::string(ggml_type_name(static_cast<ggml_type>(s.type))) +
               " cannot be generated (use F32, F16, Q8_0, Q4_K or IQ4_XS)");
  if (s.n_layer < 1 || s.n_layer > 512) return bad("layers must be in 1..512, got " + std::to_string(s.n_layer));
  if (s.n_embd < 32 || s.n_embd % 32 != 0)
    return bad("hidden size must be a positive multiple of 32, got " + std::to_string(s.n_embd));
  if (s.n_head == 0 || s.n_head_kv == 0 || s.n_head % s.n_head_kv != 0) {
    return bad("query heads (" + std::to_string(s.n_head) + ") must be a positive multiple of key/value heads (" +
               std::to_string(s.n_head_kv) + ")");
  }
  if (s.head_dim == 0 || s.head_dim % 2 != 0)
    return bad("head size must be even and positive, got " + std::to_string(s.head_dim));
  if (s.n_rot == 0 || s.n_rot % 2 != 0 || s.n_rot > s.head_dim)
    return bad("rotary dimensions must be even and at most the head size, got " + std::to_string(s.n_rot));
  if (!is_moe(s.arch)) return validate_dense(s);
  if (s.n_expert == 0 || s.n_expert > 1024) return bad("experts must be in 1..1024, got " + std::to_string(s.n_expert));
  if (s.n_expert_used == 0 || s.n_expert_used > s.n_expert) {
    return bad("used experts must be in 1.." + std::to_string(s.n_expert) + ", got " + std::to_string(s.n_expert_used));
  }
  if (s.n_ff_exp == 0 || s.n_ff_exp % 32 != 0)
    return bad("expert FFN size must be a positive multiple of 32, got " + std::to_string(s.n_ff_exp));
  if (s.arch == "qwen3moe" && s.n_rot != s.head_dim)
    return bad("qwen3moe rotates whole heads: rotary dimensions must equal the head size");
  if (s.arch == "minimax-m3" || s.arch == "glm4moe") {
    if (s.n_layer_dense_lead > s.n_layer)
      return bad("dense layers (" + std::to_string(s.n_layer_dense_lead) + ") exceed layers (" +
                 std::to_string(s.n_layer) + ")");
    if (s.n_layer_dense_lead > 0 && (s.n_ff == 0 || s.n_ff % 32 != 0))
      return bad("dense FFN size must be a positive multiple of 32, got " + std::to_string(s.n_ff));
  }
  if (s.arch == "minimax-m3") {
    if (s.n_expert_shared == 0) return bad("minimax-m3 needs at least one shared expert");
    if (s.indexer_head_size < s.n_rot || s.indexer_head_size % 32 != 0) {
      return bad("indexer key length must be a multiple of 32 and at least the rotary dimensions, got " +
                 std::to_string(s.indexer_head_size));
    }
    if (s.indexer_block_size == 0 || s.indexer_top_k == 0) return bad("indexer block size and top-k must be positive");
  }
  return Status::ok();
}

Result<std::vector<TensorSpec>> tensor_table(const ModelSpec& spec, uint32_t n_vocab) {
  TANDEM_RETURN_IF_ERROR(validate_spec(spec));
  if (n_vocab == 0) return Status::invalid_argument("vocabulary size must be positive");
  Table t(spec);
  if (spec.arch != "eagle3" || spec.own_embedding) {
    t.matrix("token_embd.weight", spec.n_embd, n_vocab, 1,
             std::sqrt(static_cast<float>(spec.n_embd)));  // unit-variance rows
  }
  if (spec.arch == "minimax-m3")
    minimax_m3(t, spec);
  else if (spec.arch == "glm4moe")
    glm4moe(t, spec);
  else if (spec.arch == "qwen3moe")
    qwen3moe(t, spec);
  else if (spec.arch == "qwen3")
    qwen3(t, spec);
  else
    eagle3(t, spec);
  t.f32("output_norm.weight", spec.n_embd, 1, Fill::ones);
  if (!spec.tie_embeddings) t.matrix("output.weight", spec.n_embd, n_vocab, 1, 3.0f);  // logits with a spread of ~3
  return std::move(t.out);
}

}  // namespace tandem::synth
