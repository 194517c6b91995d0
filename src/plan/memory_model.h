// How many bytes a model needs on each device, from its header alone.
//
// The model follows what the pinned llama.cpp allocates (see docs/planning.md):
//   - weights: every tensor of layer N goes with layer N; the token embedding stays on the head's
//     CPU (llama.cpp never offloads the input layer), and a worker that runs layer 0 holds a copy
//     (datapath/worker_embedding.h, counted by the solver); the output head and final norm go
//     with the last offload device (llama.cpp counts them as one more layer);
//   - KV cache: K and V rows for every cell of every sequence, on the device of their layer, in
//     the KV type; MiniMax-M3's sparse layers add an indexer key cache of one head;
//   - compute buffers: the scratch the scheduler reserves for the worst-case prompt batch, from
//     the graph's shape (coefficients checked against llama.cpp's own figures by the tests);
//   - a safety margin, charged against each device's free memory;
//   - under speculative decoding, a draft model on the head (plan/draft.h) and the extra rows of
//     logits the model keeps to check drafted tokens (MemoryOptions::outputs_per_sequence).
// All sizes are bytes; bandwidths are bytes per second.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "plan/cluster.h"
#include "plan/model_info.h"

namespace tandem::plan {

// A KV cache element type by name ("f16", "q8_0", ...): the ggml_type, or an error that lists the
// names llama.cpp accepts for the cache.
Result<int> parse_kv_type(const std::string& name);
std::string kv_type_name(int ggml_type);
// The KV types smaller than `ggml_type`, largest first (for "what would fit" suggestions).
std::vector<int> smaller_kv_types(int ggml_type);

struct MemoryOptions {
  uint32_t context = 4096;  // tokens each sequence can hold
  uint32_t parallel = 1;    // sequences served at once (llama.cpp's n_seq_max, one KV stream each)
  int kv_type = 1;          // ggml_type of K and V (1 = F16, llama.cpp's default)
  uint32_t n_ubatch = 512;  // prompt tokens per compute batch (llama.cpp's default)
  // Rows of logits one sequence's step keeps on the head: 1, or under speculative decoding 1 +
  // the tokens drafted per step, which the model checks in one batch (llama_context's output buffer).
  uint32_t outputs_per_sequence = 1;
  // Held back on every device: `margin_fraction` of its free memory plus `margin_bytes`. On
  // unified-memory boxes the page cache competes with the model for the same memory; see
  // docs/planning.md for how to choose these there.
  double margin_fraction = 0.05;
  uint64_t margin_bytes = uint64_t{1} << 30;
  // Held back once per unified-memory node (a GPU that shares the system memory, e.g. GB10),
  // beside the margin, because there they come out of the model's memory (HostReserve):
  uint64_t prompt_cache = 0;                  // the prompt cache's states on each node ([model] prompt_cache)
  uint64_t os_reserve = uint64_t{1} << 30;    // the OS's working set beyond the free figure ([plan] os_reserve)
  uint64_t load_reserve = uint64_t{1} << 30;  // a load's transients ([plan] load_reserve)
};

// What a unified-memory node holds back beside the model and the margin. Its free figure is
// MemAvailable-style, which leaves out what the OS held when it was read; what this adds is what
// comes once the model is served: the prompt cache's states (bounded by [model] prompt_cache on
// each node), the OS's working set beyond that figure (tandem's own processes and their CUDA
// context, services, the page cache the kernel will not give back at once), and the transients of
// a load (libllama's and the worker's staging buffers, the page cache of files being read).
struct HostReserve {
  uint64_t prompt_cache = 0, os = 0, load = 0;
  uint64_t total() const { return prompt_cache + os + load; }
};

// The reserve of device `device` of `node`: the whole reserve on the node's first unified-memory
// device (a node's devices share one pool, held back once), nothing elsewhere.
HostReserve host_reserve(const MemoryOptions& options, const NodeSpec& node, size_t device);

// Cells of the KV cache as llama.cpp sizes them: each sequence's context rounded up to 256,
// times the sequences.
uint64_t kv_cells(const MemoryOptions& options);

struct LayerCost {
  uint64_t weights = 0;         // tensor bytes of blk.N.*
  uint64_t kv = 0;              // KV cache bytes (main + indexer), all sequences
  uint64_t read_per_token = 0;  // weight bytes one generated token reads (used experts only)
  bool sparse = false;          // has a sparse-attention indexer (its scratch grows with context)
};

// The per-layer and fixed costs of one model under one set of options.
struct ModelCosts {
  std::vector<LayerCost> layers;
  uint64_t input_weights = 0;   // token embedding, on the head's CPU (and on a worker running layer 0)
  uint64_t output_weights = 0;  // output head + final norm, with the last offload device
  uint64_t output_read = 0;     // bytes the output head reads per token
  uint64_t other_weights = 0;   // tensors outside layers that are neither (kept with the input)
  uint64_t compute_dense = 0;   // compute buffer of a device holding only dense-attention layers
  uint64_t compute_sparse = 0;  // ... holding at least one sparse-attention layer
  uint64_t compute_output = 0;  // ... holding the output head (logits of a whole batch)
  uint64_t compute_host = 0;    // the head CPU's compute buffer when it holds no layer
  // Added to every device holding layers under pipeline parallelism, which llama.cpp turns on
  // when the head's CPU holds no layer (always with a GPU head): its scheduler then keeps 4 copies
  // of every graph input and of the activations that cross devices, never reused. Sized from the
  // batch's rows and masks with a coefficient measured on the test models.
  uint64_t compute_pipeline_extra = 0;
  // A batch's embedding rows (tokens x n_embd x 4 B). When the worker that runs layer 0 gathers
  // them (datapath/worker_embedding.h), the head's CPU stages two such buffers fewer, and under
  // pipeline parallelism that worker keeps four fewer (they are no longer a graph input).
  uint64_t embedding_rows = 0;
  uint64_t host_output = 0;         // the context's logits buffer on the head (outputs_per_sequence rows a sequence)
  uint64_t worker_reuse_slots = 0;  // a worker's device with sparse layers: repeated-input slots
  uint64_t input_slots = 0;         // a device that reads a step's inputs, but the head's CPU (input_slot_bytes)
  uint64_t kv_cells = 0;
  std::vector<int> sparse_before;  // [l]: sparse layers among [0, l), so a range's kind is O(1)
};

// Costs of `info` under `options`. Fails (naming the field) when the options make no sense:
// context or parallel 0, a parallel count above llama.cpp's limit, a KV type that is not a cache type.
Result<ModelCosts> model_costs(const ModelInfo& info, const MemoryOptions& options);

// Compute buffer of a device holding layers [first, first+count) (count may be 0), with the
// output head when `has_output`, being the head's CPU when `is_host`, under pipeline parallelism
// when `pipeline`.
uint64_t compute_bytes(const ModelCosts& costs, int first, int count, bool has_output, bool is_host, bool pipeline);

// Bytes held back on a device with `free_bytes` free.
uint64_t margin_bytes(const MemoryOptions& options, uint64_t free_bytes);

}  // namespace tandem::plan
