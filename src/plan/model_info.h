// What a GGUF model is, read from its header and tensor table alone: no weight is loaded.
//
// This is what `tandem inspect` prints and what the planner sizes placements from. It reads
// split models (NAME-00001-of-0000N.gguf) as one model, and "header-only" files written by
// `tandem synth --header-only` (a real tensor table with no data) as if the data were there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::plan {

// Where a tensor's bytes go when one token is generated.
enum class WeightRole {
  embedding,       // token_embd: one row per token is read
  attention,       // attn_*, indexer (index_*), their norms
  routed_experts,  // ffn_*_exps: only the used experts' slices are read
  shared_experts,  // ffn_*_shexp
  dense_ffn,       // ffn_gate/up/down of dense layers
  router,          // ffn_gate_inp, exp_probs_b
  norm,            // per-layer norms outside attention
  output,          // output.weight, output_norm
  other,
};
const char* weight_role_name(WeightRole role);

struct TensorInfo {
  std::string name;
  int type = 0;  // ggml_type
  int64_t ne[4] = {1, 1, 1, 1};
  uint64_t bytes = 0;        // size of the data in the file
  int layer = -1;            // N for "blk.N.*", -1 otherwise
  int split = 0;             // index of the file holding it
  uint64_t file_offset = 0;  // absolute offset of the data within that file
  WeightRole role = WeightRole::other;
  uint64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

// Bytes of weights read to generate one token, by role.
struct ActiveBytes {
  uint64_t embedding = 0, attention = 0, routed_experts = 0, shared_experts = 0, dense_ffn = 0, router = 0, norm = 0,
           output = 0, other = 0;
  uint64_t total() const {
    return embedding + attention + routed_experts + shared_experts + dense_ffn + router + norm + output + other;
  }
};

struct ModelInfo {
  std::vector<std::string> files;  // all splits, in order
  std::vector<uint64_t> file_sizes;
  bool header_only = false;  // written by `synth --header-only`: tensor table without data

  std::string arch;       // general.architecture
  std::string name;       // general.name, may be empty
  std::string file_type;  // e.g. "IQ4_XS": the most common weight type by bytes
  uint32_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, n_ctx_train = 0, n_vocab = 0;
  uint32_t head_dim_k = 0, head_dim_v = 0, n_ff = 0, n_ff_exp = 0;
  uint32_t n_expert = 0, n_expert_used = 0, n_expert_shared = 0, n_layer_dense_lead = 0;
  // Sparse-attention indexer (minimax-m3): heads and key size; 0 when the model has none.
  uint32_t indexer_n_head = 0, indexer_head_size = 0;
  // An EAGLE3 draft (arch "eagle3"): the hidden size of the model it was made for and how many of
  // that model's layers it reads the hidden states of (`eagle3.target_layers`, llama.cpp wants 3);
  // 0 for any other model.
  uint32_t target_hidden_size = 0, n_target_layers = 0;
  bool has_chat_template = false;

  std::vector<TensorInfo> tensors;
  uint64_t file_bytes = 0;    // sum of the files' sizes
  uint64_t tensor_bytes = 0;  // sum of the tensors' data sizes
  uint64_t n_params = 0;
  ActiveBytes active;          // per generated token
  uint64_t active_params = 0;  // parameters touched per generated token

  uint64_t active_bytes_per_token() const { return active.total(); }
};

// Reads the model at `path` (for a split model, its first file). On error, the message names the
// file and says what is wrong with it: missing, not GGUF, corrupt header, truncated data, a split
// missing, an unknown key type. Never aborts on bad input.
Result<ModelInfo> read_model_info(const std::string& path);

// Of `bytes` of tensor `t` (its own size, or a device's part of it), those one generated token
// reads: one embedding row, the used share of the routed experts, everything else.
uint64_t tensor_read_bytes(const ModelInfo& info, const TensorInfo& t, uint64_t bytes);

// The inspect report: a few aligned lines for people.
std::string format_model_info(const ModelInfo& info);

// The inspect report as JSON (see docs/cli.md: arch, n_layer, n_params, bytes,
// active_bytes_per_token and the rest).
std::string model_info_to_json(const ModelInfo& info, int indent = 2);

}  // namespace tandem::plan
