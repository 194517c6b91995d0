#include "plan/draft.h"

#include <algorithm>

#include "ggml.h"

namespace tandem::plan {
namespace {

constexpr uint64_t kF32 = 4;

// llama.cpp's EAGLE3 reads exactly this many of the model's layers (eagle3.cpp's load_arch_hparams).
constexpr uint32_t kEagle3Taps = 3;

double bits_per_weight(int type) {
  const auto t = static_cast<ggml_type>(type);
  return static_cast<double>(ggml_type_size(t)) * 8.0 / static_cast<double>(ggml_blck_size(t));
}

// The tapped hidden states of an EAGLE3 draft for a batch of `tokens` (common/speculative.cpp,
// llama_context::output_reserve): the model's output buffer keeps each tapped layer's input for
// every token of a batch (taps x n_embd rows), the speculative state copies them into one
// features buffer of the same size, and the draft's encoder hands back one hidden-state row of its
// own width a token, kept in its output buffer and copied again.
uint64_t eagle3_hidden_states(const ModelInfo& target, const ModelInfo& draft, uint64_t tokens) {
  const uint64_t taps = draft.n_target_layers > 0 ? draft.n_target_layers : kEagle3Taps;
  return 2 * tokens * taps * target.n_embd * kF32 + 2 * tokens * uint64_t{draft.n_embd} * kF32;
}

}  // namespace

const char* speculative_name(Speculative s) {
  switch (s) {
    case Speculative::off:
      return "off";
    case Speculative::ngram:
      return "ngram";
    case Speculative::draft:
      return "draft";
  }
  return "off";
}

Result<Speculative> parse_speculative(const std::string& name) {
  for (const Speculative s : {Speculative::off, Speculative::ngram, Speculative::draft}) {
    if (name == speculative_name(s)) return s;
  }
  return Status::invalid_argument("unknown speculative decoding '" + name + "' (use off, ngram or draft)");
}

Result<std::shared_ptr<const ModelInfo>> read_draft_model(const std::string& path) {
  auto info = read_model_info(path);
  if (!info.is_ok()) return info.status().with_context("the draft model ([model] draft_model)");
  return std::make_shared<const ModelInfo>(std::move(info.value()));
}

bool is_eagle3(const ModelInfo& info) { return info.arch == "eagle3"; }

Result<DraftCost> draft_cost(const ModelInfo& target, const SpeculativeOptions& s, const MemoryOptions& memory,
                             bool gpu_head) {
  DraftCost d;
  if (s.mode != Speculative::draft || !s.draft) return d;
  const ModelInfo& draft = *s.draft;
  const std::string file = draft.files.empty() ? "the draft model" : "the draft model " + draft.files.front();
  const bool eagle3 = is_eagle3(draft);
  if (eagle3 && draft.target_hidden_size != 0 && draft.target_hidden_size != target.n_embd) {
    return Status::invalid_argument(file + " is an EAGLE3 draft for a model of hidden size " +
                                    std::to_string(draft.target_hidden_size) + "; this model's is " +
                                    std::to_string(target.n_embd) + ", so it cannot read its hidden states");
  }
  // Its own context: the model's cells and batch, one row of logits a sequence per draft step.
  MemoryOptions m = memory;
  m.outputs_per_sequence = 1;
  // A draft file without a vocabulary of its own (an EAGLE3 draft may use the model's) still
  // produces the model's logits.
  ModelInfo with_vocab;
  const ModelInfo* shape = &draft;
  if (draft.n_vocab == 0) {
    with_vocab = draft;
    with_vocab.n_vocab = target.n_vocab;
    shape = &with_vocab;
  }
  auto costs = model_costs(*shape, m);
  if (!costs.is_ok()) return costs.status();
  const ModelCosts& c = costs.value();
  const int n_layer = static_cast<int>(c.layers.size());
  for (const TensorInfo& t : draft.tensors) d.weights += t.bytes;
  for (const LayerCost& l : c.layers) d.kv += l.kv;
  // Whole on one device: the output head is there too; a GPU's scheduler also keeps a CPU buffer.
  uint64_t device = compute_bytes(c, 0, n_layer, /*has_output=*/true, /*is_host=*/!gpu_head, /*pipeline=*/false);
  const uint64_t tokens = std::min<uint64_t>(m.n_ubatch, kv_cells(m));
  if (eagle3) {
    // The encoder pass (the tapped states through its fc layer) is a graph of its own.
    const uint64_t taps = draft.n_target_layers > 0 ? draft.n_target_layers : kEagle3Taps;
    device = std::max(device, tokens * (taps * target.n_embd + draft.n_embd) * kF32);
    d.hidden = eagle3_hidden_states(target, draft, tokens);
  }
  d.compute = device + (gpu_head ? c.compute_host : 0) + c.host_output;
  return d;
}

ModelInfo requantized(const ModelInfo& info, int type) {
  ModelInfo out = info;
  const auto t = static_cast<ggml_type>(type);
  const int64_t block = ggml_blck_size(t);
  out.tensor_bytes = 0;
  for (TensorInfo& tensor : out.tensors) {
    const bool matrix = tensor.ne[1] > 1;
    if (matrix && tensor.ne[0] % block == 0 && bits_per_weight(tensor.type) > bits_per_weight(type)) {
      tensor.type = type;
      tensor.bytes = ggml_row_size(t, tensor.ne[0]) * static_cast<uint64_t>(tensor.ne[1] * tensor.ne[2] * tensor.ne[3]);
    }
    out.tensor_bytes += tensor.bytes;
  }
  out.file_type = ggml_type_name(t);
  return out;
}

}  // namespace tandem::plan
