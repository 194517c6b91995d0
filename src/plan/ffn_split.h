// The FFN tensor split (`[model] parallelism = "ffn-tensor"`): which part of each weight every box
// holds when all boxes run every layer at once.
//
// Only the FFNs are split: each routed expert's gate and up projections along their width (their
// rows), its down projection along its input, the shared expert and the dense FFNs the same way,
// and the output head by vocabulary. Attention, the sparse-attention indexer, the router, the norms,
// the token embedding and the KV cache stay whole on every box, so a layer needs one exchange of
// the hidden state's partial sums (after its FFN) and nothing about attention is split: any
// architecture libllama runs is covered, minimax-m3's sparse attention included.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "plan/model_info.h"

namespace tandem::plan {

// How one tensor lies across the devices (mirrors ggml's meta split state, without ggml).
struct FfnSplitState {
  enum class Axis { mirrored, rows /* ggml axis 1 */, columns /* ggml axis 0 */, partial };
  Axis axis = Axis::mirrored;
  // For rows/columns: the elements along the split axis on each device, per segment (a fused
  // gate+up tensor is two segments, each split alike); for partial: one entry per device.
  std::vector<int64_t> ne;  // n_segments × n_devices, segment-major
  uint32_t segment_repeats = 1;
  uint32_t n_segments = 1;
};

// Why `info` cannot serve `parallel` sequences at once under a tensor split ("" when it can): with
// minimax-m3's sparse attention (a model with an indexer), a second sequence in a batch, or a state
// restored into the cache, gave other tokens than one process through llama.cpp's meta device,
// while one sequence at a time was exact.
std::string tensor_split_parallel_refusal(const ModelInfo& info, uint32_t parallel);

class FfnSplit {
 public:
  // The split of `info` over `n_devices` devices (≥ 2), in equal parts as far as the quantisation
  // blocks allow (each part of an FFN a multiple of lcm(block, 128) elements where that leaves every
  // device a part, else of the block). Errors name the tensor that cannot be split.
  static Result<FfnSplit> make(const ModelInfo& info, size_t n_devices);

  size_t n_devices() const { return n_devices_; }
  // The state of the tensor called `name`; mirrored for any name it does not split.
  const FfnSplitState& state(const std::string& name) const;
  // Weight bytes device `d` holds, and those it reads per generated token (used experts only).
  uint64_t device_weight_bytes(size_t d) const { return device_bytes_.at(d); }
  uint64_t device_read_bytes(size_t d) const { return device_read_.at(d); }
  // Bytes every device holds whole (attention, router, norms, embedding, ...).
  uint64_t mirrored_bytes() const { return mirrored_bytes_; }
  uint64_t mirrored_read_bytes() const { return mirrored_read_; }
  // Tensors split (for the report).
  size_t split_tensors() const { return split_.size(); }

 private:
  size_t n_devices_ = 0;
  std::unordered_map<std::string, FfnSplitState> split_;
  std::vector<uint64_t> device_bytes_, device_read_;
  uint64_t mirrored_bytes_ = 0, mirrored_read_ = 0;
};

}  // namespace tandem::plan
