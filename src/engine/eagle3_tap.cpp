#include "engine/eagle3_tap.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"
#include "plan/model_info.h"

namespace tandem::engine {
namespace {

// Rows kept while nothing takes them (the scheduler's warm-up, a decode that failed): beyond it
// the older micro-batches go, so an unconsumed tap does not grow.
constexpr int64_t kMaxRows = 8192;

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

}  // namespace

bool graph_records_layer_inputs(const std::string& arch) {
  // pinned llama.cpp: text src/models/qwen3moe.cpp res->t_layer_inp[il] = inpL;
  static const char* const kRecorded[] = {"llama",  "qwen3",     "qwen3moe", "qwen3next",
                                          "qwen35", "qwen35moe", "gpt-oss",  "minimax-m2"};
  return std::find(std::begin(kRecorded), std::end(kRecorded), arch) != std::end(kRecorded);
}

std::string layer_input_name(int il) {
  // The graph callback names a layer's tensors "<name>-<il>" and the others "<name>"; a layer's
  // input is the previous layer's output, and layer 0's the token embedding.
  // pinned llama.cpp: text src/llama-context.cpp if (il >= 0) { ggml_format_name(cur, "%s-%d", name, il); } else { ggml_set_name(cur, name); }
  // pinned llama.cpp: text src/llama-graph.cpp cb(cur, "embd", -1);
  // pinned llama.cpp: text src/models/minimax-m3.cpp cur = build_cvec(cur, il); cb(cur, "l_out", il); // input for next layer inpL = cur;
  // pinned llama.cpp: text src/models/qwen3moe.cpp cur = build_cvec(cur, il); cb(cur, "l_out", il); // input for next layer inpL = cur;
  return il == 0 ? "embd" : "l_out-" + std::to_string(il - 1);
}

std::unique_ptr<Eagle3Tap> Eagle3Tap::for_draft(const std::string& draft_model, const llama_model* target) {
  auto draft = plan::read_model_info(draft_model);
  if (!draft.is_ok() || draft.value().arch != "eagle3") return nullptr;
  char arch[64] = {0};
  llama_model_meta_val_str(target, "general.architecture", arch, sizeof arch);
  const char* forced = std::getenv("TANDEM_EAGLE3_TAP");
  if (graph_records_layer_inputs(arch) && (forced == nullptr || std::string(forced) != "1")) return nullptr;
  return std::make_unique<Eagle3Tap>();
}

void Eagle3Tap::install(llama_context_params* cp) {
  cp->cb_eval = &Eagle3Tap::on_eval;
  cp->cb_eval_user_data = this;
}

Status Eagle3Tap::watch(const std::vector<int32_t>& layers, int n_layer, int n_embd) {
  if (layers.empty()) return Status::invalid_argument("an EAGLE3 tap needs at least one layer");
  std::vector<std::string> names;
  std::vector<int> name_of_tap;
  for (int32_t il : layers) {
    if (il < 0 || il >= n_layer) {
      return Status::invalid_argument("the draft reads target layer " + std::to_string(il) +
                                      ", but only the inputs of layers 0.." + std::to_string(n_layer - 1) +
                                      " can be tapped (the final hidden state is cut to the output rows)");
    }
    const std::string name = layer_input_name(il);
    auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) it = names.insert(names.end(), name);
    name_of_tap.push_back(static_cast<int>(it - names.begin()));
  }
  layers_ = layers;
  names_ = std::move(names);
  name_of_tap_ = std::move(name_of_tap);
  n_embd_ = n_embd;
  rows_.assign(names_.size(), {});
  seen_.assign(names_.size(), false);
  ubatch_first_ = ubatch_rows_ = ubatches_ = 0;
  wrong_shape_ = false;
  return Status::ok();
}

int Eagle3Tap::wanted(const ggml_tensor* t) const {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (std::strcmp(t->name, names_[i].c_str()) == 0) return static_cast<int>(i);
  }
  return -1;
}

void Eagle3Tap::observe(ggml_tensor* t, int name) {
  const uint64_t t0 = now_ns();
  // The graph names each tensor once, so a name seen again is the next micro-batch's.
  if (seen_[static_cast<size_t>(name)]) {
    ubatch_first_ += ubatch_rows_;
    ubatch_rows_ = 0;
    std::fill(seen_.begin(), seen_.end(), false);
    if (ubatch_first_ > kMaxRows) {
      for (auto& r : rows_) r.clear();
      ubatch_first_ = 0;
    }
  }
  const int64_t n_rows = t->ne[1];
  if (ubatch_rows_ == 0) {
    ubatch_rows_ = n_rows;
    ++ubatches_;
  }
  seen_[static_cast<size_t>(name)] = true;
  if (t->type != GGML_TYPE_F32 || t->ne[0] != n_embd_ || n_rows != ubatch_rows_ || !ggml_is_contiguous(t)) {
    wrong_shape_ = true;
    return;
  }
  std::vector<float>& rows = rows_[static_cast<size_t>(name)];
  const size_t at = static_cast<size_t>(ubatch_first_) * static_cast<size_t>(n_embd_);
  rows.resize(at + static_cast<size_t>(n_rows) * static_cast<size_t>(n_embd_));
  // The scheduler synchronised the device that computed it; from a worker this is one RPC read.
  ggml_backend_tensor_get(t, rows.data() + at, 0, ggml_nbytes(t));
  ++stats_.observed;
  stats_.bytes += ggml_nbytes(t);
  stats_.callback_ns += now_ns() - t0;
}

bool Eagle3Tap::on_eval(ggml_tensor* t, bool ask, void* user) {
  auto* tap = static_cast<Eagle3Tap*>(user);
  const int name = tap->wanted(t);
  if (ask) return name >= 0;
  if (name >= 0) tap->observe(t, name);
  return true;
}

Status Eagle3Tap::take(int n_tokens, std::vector<float>* features) {
  Status status;
  const int64_t total = ubatch_first_ + ubatch_rows_;
  for (size_t i = 0; i < names_.size() && status.is_ok(); ++i) {
    if (!seen_[i])
      status = Status::internal("the target's graph computed no tensor '" + names_[i] + "' in its last step");
  }
  if (status.is_ok() && wrong_shape_)
    status = Status::internal("a tapped tensor of the target's graph is not [" + std::to_string(n_embd_) +
                              ", tokens] floats");
  if (status.is_ok() && total < n_tokens)
    status = Status::internal("the tap holds " + std::to_string(total) + " rows for a step of " +
                              std::to_string(n_tokens) + " tokens");
  if (status.is_ok()) {
    const size_t n_embd = static_cast<size_t>(n_embd_), n_taps = layers_.size();
    const size_t first = static_cast<size_t>(total - n_tokens);
    features->resize(static_cast<size_t>(n_tokens) * n_taps * n_embd);
    for (size_t i = 0; i < static_cast<size_t>(n_tokens); ++i) {
      for (size_t k = 0; k < n_taps; ++k) {
        const float* src = rows_[static_cast<size_t>(name_of_tap_[k])].data() + (first + i) * n_embd;
        std::memcpy(features->data() + (i * n_taps + k) * n_embd, src, n_embd * sizeof(float));
      }
    }
    ++stats_.decodes;
    if (ubatches_ > 1) ++stats_.multi_ubatch;
  }
  for (auto& r : rows_) r.clear();
  std::fill(seen_.begin(), seen_.end(), false);
  ubatch_first_ = ubatch_rows_ = ubatches_ = 0;
  wrong_shape_ = false;
  return status;
}

}  // namespace tandem::engine
