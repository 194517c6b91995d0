// The shape of a synthetic model: everything `tandem synth` needs to write its GGUF.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "synth/quant_gen.h"

namespace tandem::synth {

struct ModelSpec {
  // "minimax-m3", "qwen3moe" or "glm4moe"; the drafts of synth/draft.h also "qwen3" (dense) and "eagle3"
  std::string arch = "minimax-m3";
  std::string name = "tandem-synth";
  uint32_t n_layer = 4;
  uint32_t n_layer_dense_lead = 1;  // minimax-m3, glm4moe: leading layers with a dense FFN
  uint32_t n_embd = 256;
  uint32_t n_head = 4;
  uint32_t n_head_kv = 2;
  uint32_t head_dim = 64;
  uint32_t n_rot = 32;      // rotary dimensions per head (partial rotary)
  uint32_t n_ff = 512;      // dense FFN width
  uint32_t n_ff_exp = 256;  // expert FFN width
  uint32_t n_expert = 8;
  uint32_t n_expert_used = 2;
  uint32_t n_expert_shared = 1;
  uint32_t n_ctx_train = 4096;
  // minimax-m3 sparse attention indexer (one indexer head per key/value head)
  uint32_t indexer_head_size = 64;
  uint32_t indexer_top_k = 4;
  uint32_t indexer_block_size = 64;
  uint32_t indexer_local_blocks = 1;
  float rope_theta = 10000.0f;
  float rms_eps = 1e-6f;
  float expert_weights_scale = 1.0f;
  bool expert_weights_norm = true;

  int type = 12;                                    // ggml_type of the large matrices (12 = Q4_K)
  std::string vocab = "ggml-vocab-llama-spm.gguf";  // tokenizer source, in llama.cpp's models/
  uint32_t n_vocab = 0;                             // 0: the tokenizer's size; header-only models may set the real one
  std::string chat_template;                        // file in llama.cpp's models/templates, "" for none
  bool header_only = false;                         // write the tensor table only, no data
  // qwen3: no output.weight; libllama uses the token embedding as the output head (as Qwen3-0.6B ties them).
  bool tie_embeddings = false;
  // eagle3 (one decoder layer): the three target layers whose inputs it reads (llama.cpp's
  // `eagle3.target_layers`), the target's hidden size, and whether it carries a token embedding of
  // its own (without one, libllama reads the target's, and a context needs the target's beside it).
  std::vector<int32_t> target_layers;
  uint32_t target_embd = 0;
  bool own_embedding = false;
  uint64_t seed = 42;
};

// One tensor of the model, in file order.
struct TensorSpec {
  std::string name;
  int type = 0;  // ggml_type
  int64_t ne[4] = {1, 1, 1, 1};
  Fill fill = Fill::random;
  float scale = 0.02f;  // standard deviation of Fill::random
};

// The tensor table of `spec` with `n_vocab` tokens; an error names the dimension that does not
// fit (e.g. a K-quant row that is not a multiple of 256 elements falls back to Q8_0 or F16, but
// an indexer head count that differs from the key/value head count is refused).
Result<std::vector<TensorSpec>> tensor_table(const ModelSpec& spec, uint32_t n_vocab);

// Checks the spec's numbers against each other and the architecture's rules.
Status validate_spec(const ModelSpec& spec);

}  // namespace tandem::synth
