// A header-only EAGLE3 draft (arch "eagle3", llama.cpp's src/models/eagle3.cpp) for the planner's
// tests: the tensor table and keys of a one-layer draft, no data (`tandem.header_only`), as
// `tandem synth --header-only` writes a model. tandem synth has no EAGLE3 preset.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ggml.h"
#include "gguf.h"

namespace tandem::plan::testing {

struct Eagle3Shape {
  std::string name = "test EAGLE3 draft";
  uint32_t n_embd = 256, n_head = 4, n_head_kv = 2, head_dim = 64, n_ff = 512, n_vocab = 1024;
  uint32_t target_hidden = 256;  // the hidden size of the model it drafts for
  bool own_embedding = true;     // token_embd in the file (else the model's is used)
  bool own_output = true;        // output (the LM head) in the file (else the model's is used)
  int type = GGML_TYPE_Q8_0;     // the matrices' type; norms are F32
};

// Writes the draft's header to `path`; false when ggml cannot write it.
inline bool write_eagle3_header(const std::string& path, const Eagle3Shape& s) {
  struct Free {
    void operator()(gguf_context* g) const { gguf_free(g); }
    void operator()(ggml_context* c) const { ggml_free(c); }
  };
  std::unique_ptr<gguf_context, Free> g(gguf_init_empty());
  ggml_init_params ip{32 * ggml_tensor_overhead(), nullptr, /*no_alloc=*/true};
  std::unique_ptr<ggml_context, Free> meta(ggml_init(ip));
  auto u32 = [&](const std::string& key, uint32_t v) { gguf_set_val_u32(g.get(), ("eagle3." + key).c_str(), v); };
  gguf_set_val_str(g.get(), "general.architecture", "eagle3");
  gguf_set_val_str(g.get(), "general.name", s.name.c_str());
  gguf_set_val_bool(g.get(), "tandem.header_only", true);
  u32("block_count", 1);
  u32("context_length", 4096);
  u32("embedding_length", s.n_embd);
  u32("feed_forward_length", s.n_ff);
  u32("attention.head_count", s.n_head);
  u32("attention.head_count_kv", s.n_head_kv);
  u32("attention.key_length", s.head_dim);
  u32("attention.value_length", s.head_dim);
  u32("vocab_size", s.n_vocab);
  u32("target_hidden_size", s.target_hidden);
  const int32_t taps[3] = {2, 30, 57};
  gguf_set_arr_data(g.get(), "eagle3.target_layers", GGUF_TYPE_INT32, taps, 3);
  auto add = [&](const std::string& name, int type, int64_t ne0, int64_t ne1) {
    ggml_tensor* t = ggml_new_tensor_2d(meta.get(), static_cast<ggml_type>(type), ne0, ne1);
    ggml_set_name(t, name.c_str());
    gguf_add_tensor(g.get(), t);
  };
  const int64_t e = s.n_embd, q = int64_t{s.n_head} * s.head_dim, kv = int64_t{s.n_head_kv} * s.head_dim;
  if (s.own_embedding) add("token_embd.weight", s.type, e, s.n_vocab);
  add("fc.weight", s.type, 3 * int64_t{s.target_hidden}, e);
  add("blk.0.attn_norm.weight", GGML_TYPE_F32, e, 1);
  add("blk.0.attn_norm_2.weight", GGML_TYPE_F32, e, 1);
  add("blk.0.attn_q.weight", s.type, 2 * e, q);
  add("blk.0.attn_k.weight", s.type, 2 * e, kv);
  add("blk.0.attn_v.weight", s.type, 2 * e, kv);
  add("blk.0.attn_output.weight", s.type, q, e);
  add("blk.0.ffn_norm.weight", GGML_TYPE_F32, e, 1);
  add("blk.0.ffn_gate.weight", s.type, e, s.n_ff);
  add("blk.0.ffn_up.weight", s.type, e, s.n_ff);
  add("blk.0.ffn_down.weight", s.type, s.n_ff, e);
  add("output_norm.weight", GGML_TYPE_F32, e, 1);
  if (s.own_output) add("output.weight", s.type, e, s.n_vocab);
  return gguf_write_to_file(g.get(), path.c_str(), /*only_meta=*/true);
}

}  // namespace tandem::plan::testing
