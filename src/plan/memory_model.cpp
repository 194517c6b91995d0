#include "plan/memory_model.h"

#include <algorithm>
#include <cctype>

#include "datapath/input_reuse.h"
#include "ggml.h"

namespace tandem::plan {
namespace {

// The cache types llama.cpp's context accepts (common/arg.cpp's kv_cache_types), largest first.
const ggml_type kKvTypes[] = {GGML_TYPE_F32,  GGML_TYPE_F16,    GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q5_1,
                              GGML_TYPE_Q5_0, GGML_TYPE_IQ4_NL, GGML_TYPE_Q4_1, GGML_TYPE_Q4_0};

// llama.cpp's LLAMA_MAX_SEQ.
constexpr uint32_t kMaxSequences = 256;

uint64_t row_bytes(int type, uint64_t elements) {
  return ggml_row_size(static_cast<ggml_type>(type), static_cast<int64_t>(elements));
}

uint64_t pad256(uint64_t n) { return (n + 255) / 256 * 256; }

// Shapes that size the scratch of one worst-case prompt batch (llama_context::sched_reserve:
// T = min(n_ctx, n_ubatch) tokens spread over `parallel` streams, every KV cell visible).
struct GraphShape {
  uint64_t tokens = 0;  // T
  uint64_t tokens_per_stream = 0;
  uint64_t kv_per_stream = 0;  // cells one stream attends over
};

GraphShape graph_shape(const MemoryOptions& o) {
  GraphShape g;
  const uint64_t cells = kv_cells(o);
  g.tokens = std::min<uint64_t>(o.n_ubatch, cells);
  g.tokens_per_stream = std::max<uint64_t>(1, g.tokens / o.parallel);
  g.kv_per_stream = pad256(o.context);
  return g;
}

// The scratch of one layer's attention and FFN phases; the allocator reuses memory between
// phases and layers, so a device needs the largest, not the sum. Coefficients: the live F32
// tensors of minimax-m3's graph (indexer scores and block mask: ~2.4 per head and cell, the
// attention masks: ~2 per cell, the residual stream: 2 rows), checked against llama.cpp's
// reserved sizes in tests/plan/plan_accuracy_test.cpp.
uint64_t layer_scratch(const ModelInfo& info, const GraphShape& g, bool sparse, bool moe) {
  const uint64_t f32 = 4;
  const uint64_t mask = g.kv_per_stream * g.tokens * f32;
  const uint64_t resid = g.tokens * info.n_embd * f32;
  uint64_t attn = 2 * mask + 2 * resid;
  if (sparse) {
    const uint64_t scores = g.kv_per_stream * g.tokens_per_stream * std::max<uint32_t>(1, info.indexer_n_head) * f32;
    attn += scores * 12 / 5;
  }
  uint64_t ffn = 0;
  if (moe) {
    const uint64_t width = uint64_t{info.n_expert_used} * info.n_ff_exp;
    ffn = g.tokens * f32 * (2 * width + 2 * uint64_t{info.n_expert_used} * info.n_embd + info.n_embd);
  } else {
    ffn = g.tokens * f32 * (2 * uint64_t{info.n_ff} + info.n_embd);
  }
  return std::max(attn, ffn);
}

bool layer_is_moe(const ModelInfo& info, int il) {
  return info.n_expert > 0 && static_cast<uint32_t>(il) >= info.n_layer_dense_lead;
}

// KV bytes of layer `il` for `cells` cells (llama_kv_cache: K and V rows per cell; minimax-m3's
// llama_kv_cache_msa adds, for sparse layers, a cache of one head with the indexer's key size
// and the model's value size).
uint64_t layer_kv(const ModelInfo& info, int il, int kv_type, uint64_t cells) {
  uint64_t per_cell = row_bytes(kv_type, uint64_t{info.n_head_kv} * info.head_dim_k) +
                      row_bytes(kv_type, uint64_t{info.n_head_kv} * info.head_dim_v);
  const bool sparse = info.indexer_head_size > 0 && static_cast<uint32_t>(il) >= info.n_layer_dense_lead;
  if (sparse) per_cell += row_bytes(kv_type, info.indexer_head_size) + row_bytes(kv_type, info.head_dim_v);
  return per_cell * cells;
}

}  // namespace

Result<int> parse_kv_type(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string known;
  for (ggml_type t : kKvTypes) {
    if (lower == ggml_type_name(t)) return static_cast<int>(t);
    known += (known.empty() ? "" : ", ") + std::string(ggml_type_name(t));
  }
  return Status::invalid_argument("unknown KV cache type '" + name + "' (use one of " + known + ")");
}

std::string kv_type_name(int type) { return ggml_type_name(static_cast<ggml_type>(type)); }

std::vector<int> smaller_kv_types(int type) {
  const double bits = ggml_type_size(static_cast<ggml_type>(type)) * 8.0 / ggml_blck_size(static_cast<ggml_type>(type));
  std::vector<int> out;
  for (ggml_type t : {GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0}) {
    if (ggml_type_size(t) * 8.0 / ggml_blck_size(t) < bits) out.push_back(t);
  }
  return out;
}

uint64_t kv_cells(const MemoryOptions& o) { return pad256(o.context) * o.parallel; }

HostReserve host_reserve(const MemoryOptions& o, const NodeSpec& node, size_t device) {
  for (size_t i = 0; i < node.devices.size(); ++i) {
    if (!node.devices[i].unified_memory) continue;
    if (i != device) return {};
    return HostReserve{o.prompt_cache, o.os_reserve, o.load_reserve};
  }
  return {};
}

uint64_t margin_bytes(const MemoryOptions& o, uint64_t free_bytes) {
  return static_cast<uint64_t>(static_cast<double>(free_bytes) * o.margin_fraction) + o.margin_bytes;
}

Result<ModelCosts> model_costs(const ModelInfo& info, const MemoryOptions& o) {
  if (o.context == 0) return Status::invalid_argument("context must be at least 1 token");
  if (o.parallel == 0 || o.parallel > kMaxSequences) {
    return Status::invalid_argument("parallel must be in 1.." + std::to_string(kMaxSequences) + ", got " +
                                    std::to_string(o.parallel));
  }
  if (o.margin_fraction < 0 || o.margin_fraction >= 1) {
    return Status::invalid_argument("the margin fraction must be in [0, 1)");
  }
  bool known_type = false;
  for (ggml_type t : kKvTypes) known_type = known_type || t == o.kv_type;
  if (!known_type) return Status::invalid_argument("KV type " + std::to_string(o.kv_type) + " is not a cache type");

  ModelCosts c;
  c.kv_cells = kv_cells(o);
  c.layers.resize(info.n_layer);
  const GraphShape g = graph_shape(o);
  for (const TensorInfo& t : info.tensors) {
    if (t.layer >= 0 && static_cast<uint32_t>(t.layer) < info.n_layer) {
      LayerCost& l = c.layers[t.layer];
      l.weights += t.bytes;
      uint64_t read = t.bytes;
      if (t.role == WeightRole::routed_experts && t.ne[2] > 0 && info.n_expert_used > 0) {
        read = t.bytes / t.ne[2] * std::min<uint64_t>(info.n_expert_used, t.ne[2]);
      }
      l.read_per_token += read;
    } else if (t.role == WeightRole::embedding) {
      c.input_weights += t.bytes;
    } else if (t.role == WeightRole::output) {
      c.output_weights += t.bytes;
      c.output_read += t.bytes;
    } else {
      c.other_weights += t.bytes;
    }
  }
  const uint64_t f32 = 4;
  const uint64_t resid = g.tokens * info.n_embd * f32;
  for (uint32_t il = 0; il < info.n_layer; ++il) {
    LayerCost& l = c.layers[il];
    l.kv = layer_kv(info, static_cast<int>(il), o.kv_type, c.kv_cells);
    l.sparse = info.indexer_head_size > 0 && il >= info.n_layer_dense_lead;
    const uint64_t scratch = layer_scratch(info, g, l.sparse, layer_is_moe(info, static_cast<int>(il)));
    uint64_t& slot = l.sparse ? c.compute_sparse : c.compute_dense;
    slot = std::max(slot, scratch);
  }
  c.sparse_before.assign(info.n_layer + 1, 0);
  for (uint32_t il = 0; il < info.n_layer; ++il)
    c.sparse_before[il + 1] = c.sparse_before[il] + (c.layers[il].sparse ? 1 : 0);
  // The output device holds the logits of every token of the batch (n_outputs = T at reserve).
  c.compute_output = g.tokens * uint64_t{info.n_vocab} * f32 + 6 * resid;
  // With no layer, the head's CPU still gathers the embedding rows and stages the batch's masks.
  c.compute_host = 2 * resid + g.kv_per_stream * g.tokens * f32 * 5 / 2;
  c.compute_pipeline_extra = 3 * g.kv_per_stream * g.tokens * f32 + 12 * resid;
  c.embedding_rows = resid;
  c.host_output = uint64_t{info.n_vocab} * f32 * o.parallel * std::max<uint32_t>(1, o.outputs_per_sequence);
  c.input_slots = datapath::input_slot_bytes(info.n_embd, g.tokens, g.kv_per_stream);
  // A worker holding sparse layers keeps the batch's repeated inputs in reuse slots
  // (datapath/input_reuse.h): the position mask (positions x batch tokens) and the block bias, up to
  // the head's budget, allocated at most a quarter larger than what they hold.
  if (c.sparse_before[info.n_layer] > 0) {
    const uint64_t mask = g.kv_per_stream * g.tokens * f32;
    c.worker_reuse_slots = std::min<uint64_t>(mask + mask / 64, datapath::kReuseBudget) * 5 / 4;
  }
  return c;
}

uint64_t compute_bytes(const ModelCosts& c, int first, int count, bool has_output, bool is_host, bool pipeline) {
  uint64_t bytes = 0;
  if (count > 0) {
    const bool any_sparse = c.sparse_before[first + count] > c.sparse_before[first];
    const bool any_dense = c.sparse_before[first + count] - c.sparse_before[first] < count;
    if (any_sparse) bytes = std::max(bytes, c.compute_sparse);
    if (any_dense) bytes = std::max(bytes, c.compute_dense);
  }
  if (has_output) bytes = std::max(bytes, c.compute_output);
  if (is_host && count == 0) bytes = std::max(bytes, c.compute_host);
  if (pipeline && count > 0) bytes += c.compute_pipeline_extra;
  return bytes;
}

}  // namespace tandem::plan
