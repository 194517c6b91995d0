#include "synth/draft.h"

#include <algorithm>
#include <filesystem>

#include "ggml.h"
#include "plan/gguf_file.h"
#include "plan/model_info.h"
#include "synth/presets.h"
#include "synth/vocab.h"

namespace tandem::synth {
namespace {

// What a draft takes from its target besides the shapes ModelInfo holds.
struct TargetFacts {
  plan::ModelInfo info;
  std::string path;  // absolute: synth's vocabulary lookup takes a name without '/' as one in models/
  uint32_t n_tokens = 0;
  float rope_theta = 10000.0f;
  float rms_eps = 1e-6f;
};

Result<TargetFacts> read_target(const std::string& target_path) {
  TargetFacts t;
  auto info = plan::read_model_info(target_path);
  if (!info.is_ok()) return info.status().with_context("draft target");
  t.info = std::move(info.value());
  if (t.info.arch == "eagle3")
    return Status::invalid_argument(target_path + ": is an eagle3 draft, not a target model");
  t.path = std::filesystem::absolute(t.info.files.front()).string();

  auto vocab = open_vocab(t.path, "");
  if (!vocab.is_ok()) {
    std::string why = vocab.status().message();  // open_vocab's names the absolute path first
    if (why.rfind(t.path + ": ", 0) == 0) why = why.substr(t.path.size() + 2);
    return Status::invalid_argument(target_path + ": its tokenizer cannot be copied into a draft: " + why);
  }
  t.n_tokens = vocab->n_tokens;
  for (const plan::TensorInfo& x : t.info.tensors) {
    if (x.name == "token_embd.weight" && static_cast<uint64_t>(x.ne[1]) != t.n_tokens) {
      return Status::invalid_argument(target_path + ": its tokenizer has " + std::to_string(t.n_tokens) +
                                      " tokens but token_embd.weight has " + std::to_string(x.ne[1]) +
                                      " rows: a draft cannot match both");
    }
  }
  auto theta = plan::gguf_get_float(vocab->gguf.get(), t.info.arch + ".rope.freq_base", t.rope_theta);
  if (theta.is_ok()) t.rope_theta = static_cast<float>(theta.value());
  auto eps = plan::gguf_get_float(vocab->gguf.get(), t.info.arch + ".attention.layer_norm_rms_epsilon", t.rms_eps);
  if (eps.is_ok() && eps.value() > 0) t.rms_eps = static_cast<float>(eps.value());
  return t;
}

// The target's most common weight type where synth generates it, else Q8_0.
int default_type(const plan::ModelInfo& target) {
  auto t = parse_weight_type(target.file_type);
  return t.is_ok() ? t.value() : static_cast<int>(GGML_TYPE_Q8_0);
}

// Heads of `head_dim` (the target's where it divides the hidden size, else 64 or 32) over the
// hidden size, and key/value heads that divide them.
void set_heads(ModelSpec& s, uint32_t preferred_head_dim, uint32_t preferred_kv) {
  uint32_t hd = preferred_head_dim;
  if (hd == 0 || hd % 2 != 0 || s.n_embd % hd != 0) hd = s.n_embd % 64 == 0 ? 64 : 32;
  s.head_dim = hd;
  s.n_rot = hd;
  s.n_head = s.n_embd / hd;
  s.n_head_kv = preferred_kv > 0 && s.n_head % preferred_kv == 0 ? preferred_kv : s.n_head;
}

Status check_target_layers(const std::vector<int32_t>& layers, const plan::ModelInfo& target,
                           const std::string& target_path) {
  if (layers.size() != 3) {
    return Status::invalid_argument("an eagle3 draft reads exactly 3 target layers, got " +
                                    std::to_string(layers.size()));
  }
  for (int32_t l : layers) {
    // llama.cpp reads layer n_layer (the last layer's output) through the target's nextn output,
    // which neither qwen3moe nor minimax-m3 produces in the pinned llama.cpp: refused here.
    if (l < 0 || static_cast<uint32_t>(l) >= target.n_layer) {
      return Status::invalid_argument("target layer " + std::to_string(l) + " is not one of " + target_path + "'s " +
                                      std::to_string(target.n_layer) + " layers (0.." +
                                      std::to_string(target.n_layer - 1) + ")");
    }
  }
  return Status::ok();
}

ModelSpec small_spec(const TargetFacts& t, const DraftOptions& o) {
  ModelSpec s;
  s.arch = "qwen3";
  s.n_layer = o.n_layer > 0 ? o.n_layer : 1;
  s.n_layer_dense_lead = 0;
  // 256 wide unless the target is narrower (a multiple of 32, as validate_spec wants).
  s.n_embd = o.n_embd > 0 ? o.n_embd : std::max<uint32_t>(32, std::min<uint32_t>(256, t.info.n_embd / 32 * 32));
  set_heads(s, 64, 0);
  s.n_head_kv = s.n_head % 2 == 0 ? s.n_head / 2 : s.n_head;
  s.n_ff = 2 * s.n_embd;
  // Tied, as Qwen3's small models are: half the file of a separate output head.
  s.tie_embeddings = true;
  return s;
}

ModelSpec eagle3_spec(const TargetFacts& t, const DraftOptions& o) {
  ModelSpec s;
  s.arch = "eagle3";
  s.n_layer = 1;
  s.n_layer_dense_lead = 0;
  s.n_embd = t.info.n_embd;
  set_heads(s, t.info.head_dim_k, t.info.n_head_kv);
  s.n_ff = t.info.n_ff > 0 && t.info.n_ff % 32 == 0 ? t.info.n_ff : 2 * s.n_embd;
  s.target_layers = o.target_layers.empty() ? default_target_layers(t.info.n_layer) : o.target_layers;
  s.target_embd = t.info.n_embd;
  s.own_embedding = o.own_embedding;
  return s;
}

}  // namespace

const char* draft_kind_name(DraftKind kind) { return kind == DraftKind::eagle3 ? "eagle3" : "small"; }

Result<DraftKind> parse_draft_kind(const std::string& name) {
  if (name == "small") return DraftKind::small;
  if (name == "eagle3") return DraftKind::eagle3;
  return Status::invalid_argument("unknown draft kind '" + name + "' (use small or eagle3)");
}

std::vector<int32_t> default_target_layers(uint32_t n) {
  if (n == 0) return {};
  const auto l = [](uint32_t v) { return static_cast<int32_t>(v); };
  if (n >= 6) return {2, l(n / 2), l(n - 3)};
  return {0, l(n / 2), l(n - 1)};
}

Result<ModelSpec> draft_spec(const std::string& target_path, const DraftOptions& options) {
  auto target = read_target(target_path);
  if (!target.is_ok()) return target.status();
  const TargetFacts& t = target.value();
  ModelSpec s;
  if (options.kind == DraftKind::eagle3) {
    if (options.n_layer > 1 || (options.n_embd > 0 && options.n_embd != t.info.n_embd)) {
      return Status::invalid_argument("an eagle3 draft has one layer and the target's hidden size (" +
                                      std::to_string(t.info.n_embd) + "): its layers and width cannot be set");
    }
    s = eagle3_spec(t, options);
    TANDEM_RETURN_IF_ERROR(check_target_layers(s.target_layers, t.info, target_path));
  } else {
    if (!options.target_layers.empty() || options.own_embedding) {
      return Status::invalid_argument("target layers and an own embedding are eagle3 options, not a small draft's");
    }
    s = small_spec(t, options);
  }
  const std::string target_name =
      t.info.name.empty() ? std::filesystem::path(target_path).filename().string() : t.info.name;
  s.name = std::string("tandem ") + draft_kind_name(options.kind) + " draft for " + target_name;
  s.type = options.type >= 0 ? options.type : default_type(t.info);
  s.vocab = t.path;
  s.n_vocab = t.n_tokens;
  s.chat_template.clear();  // the target's, if any, comes with its tokenizer.* keys
  s.n_ctx_train = t.info.n_ctx_train > 0 ? t.info.n_ctx_train : s.n_ctx_train;
  s.rope_theta = t.rope_theta;
  s.rms_eps = t.rms_eps;
  s.seed = options.seed;
  TANDEM_RETURN_IF_ERROR(validate_spec(s).with_context(std::string(draft_kind_name(options.kind)) + " draft"));
  return s;
}

Result<DraftResult> write_draft(const std::string& target_path, const std::string& path, const DraftOptions& options,
                                const SynthOptions& synth_options) {
  auto spec = draft_spec(target_path, options);
  if (!spec.is_ok()) return spec.status();
  auto written = write_model(spec.value(), path, synth_options);
  if (!written.is_ok()) return written.status();
  return DraftResult{std::move(written.value()), std::move(spec.value())};
}

}  // namespace tandem::synth
