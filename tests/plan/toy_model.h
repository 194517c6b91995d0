// A made-up model for the planner's tests: `n_layer` layers of one `layer_mib` MiB F32 tensor
// each (`layer_tensor`, of role `role`), a 4 MiB embedding and a 4 MiB output head; the KV cache
// and compute buffers are small.
#pragma once

#include <cstdint>
#include <string>

#include "ggml.h"
#include "plan/model_info.h"

namespace tandem::plan::testing {

inline ModelInfo toy_model(int n_layer, uint64_t layer_mib, const std::string& layer_tensor = "attn_q",
                           WeightRole role = WeightRole::attention) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  ModelInfo m;
  m.arch = "toy";
  m.n_layer = n_layer;
  m.n_embd = 64;
  m.n_head = m.n_head_kv = 1;
  m.head_dim_k = m.head_dim_v = 64;
  m.n_ff = 64;
  m.n_vocab = 1000;
  auto add = [&](const std::string& name, int layer, WeightRole r, uint64_t bytes) {
    TensorInfo t;
    t.name = name;
    t.type = GGML_TYPE_F32;
    t.ne[0] = static_cast<int64_t>(bytes / 4);
    t.bytes = bytes;
    t.layer = layer;
    t.role = r;
    m.tensors.push_back(t);
  };
  add("token_embd.weight", -1, WeightRole::embedding, 4 * kMiB);
  for (int i = 0; i < n_layer; ++i)
    add("blk." + std::to_string(i) + "." + layer_tensor + ".weight", i, role, layer_mib * kMiB);
  add("output.weight", -1, WeightRole::output, 4 * kMiB);
  return m;
}

}  // namespace tandem::plan::testing
