#include "engine/speculation.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>

#include "common.h"
#include "common/log.h"
#include "engine/eagle3_drafter.h"
#include "engine/eagle3_tap.h"
#include "engine/llama_log.h"
#include "engine/model_loader.h"
#include "llama.h"
#include "speculative.h"

namespace tandem::engine {

namespace {

// The n-gram drafter's key: a draft is proposed once the last 8 tokens occurred earlier in the
// sequence, and it is what followed them there. Long enough that prose rarely matches by chance,
// short enough that a re-emitted line of code or a tool result's field does.
constexpr uint16_t kNgramKey = 8;

// The pinned common_speculative_types_from_gguf knows MTP and DFlash drafts, not EAGLE3 ones: the
// architecture says it.
std::string architecture(const llama_model* model) {
  char arch[64] = {0};
  return llama_model_meta_val_str(model, "general.architecture", arch, sizeof arch) > 0 ? arch : "";
}

// llama.cpp's synthetic acceptance rates for `length` tokens a step with drafts of `n_max`, as the
// chance of each drafted token once the ones before it were kept (the same for every route,
// tandem's EAGLE3 driver included).
Result<std::vector<double>> synthetic_probs(double length, int n_max) {
  common_params_speculative params;
  params.synth_len = length;
  std::vector<double> rates;
  try {
    rates = common_speculative_synth_rates_resolve(&params, n_max);
  } catch (const std::exception& e) {
    return Status::invalid_argument(std::string("spec_synth_len ") + std::to_string(length) + ": " + e.what());
  }
  std::vector<double> probs;
  double before = 1.0;
  for (const double rate : rates) {
    probs.push_back(before > 0 ? rate / before : 0.0);
    before = rate;
  }
  return probs;
}

}  // namespace

struct Speculator::Draft {
  llama_model* model = nullptr;
  llama_context* ctx = nullptr;
  bool eagle3 = false;
  ~Draft() {
    if (ctx != nullptr) llama_free(ctx);
    if (model != nullptr) llama_model_free(model);
  }
};

Speculator::Speculator(SpeculationOptions options, int n_seq) : options_(std::move(options)), n_seq_(n_seq) {}

Speculator::~Speculator() {
  if (spec_ != nullptr) common_speculative_free(spec_);
}

Status Speculator::load_draft(llama_context* target, int n_seq) {
  const std::string& path = options_.draft_model;
  std::error_code ec;
  if (path.empty()) return Status::invalid_argument("speculative decoding 'draft' needs a draft model");
  if (!std::filesystem::is_regular_file(path, ec)) return Status::not_found("draft model " + path + ": no such file");
  draft_ = std::make_unique<Draft>();
  llama_model_params mp = llama_model_default_params();
  // On the head, whole: its first GPU, else the CPU; the workers' devices never.
  std::vector<ggml_backend_dev_t> devices = local_gpus();
  if (devices.size() > 1) devices.resize(1);
  devices.push_back(nullptr);
  mp.devices = devices.data();
  mp.n_gpu_layers = devices.size() > 1 ? -1 : 0;
  take_last_llama_error();
  draft_->model = llama_model_load_from_file(path.c_str(), mp);
  if (draft_->model == nullptr) {
    const std::string why = take_last_llama_error();
    return Status::invalid_argument("draft model " + path + ": libllama cannot load it" +
                                    (why.empty() ? "" : ": " + why));
  }
  draft_->eagle3 = architecture(draft_->model) == "eagle3";
  const std::string target_arch = architecture(llama_get_model(target));
  // On a target whose graph does not record them, llama.cpp's own route aborts the process in the
  // first decode; the tap (installed when the target's context was made) reads them instead.
  if (draft_->eagle3 && tap_ == nullptr && !graph_records_layer_inputs(target_arch)) {
    return Status::invalid_argument("draft model " + path + ": an EAGLE3 draft reads the hidden states of the " +
                                    target_arch +
                                    " model's layers, which the pinned llama.cpp does not record for that "
                                    "architecture, and no tap was installed in the target's context");
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = llama_n_ctx(target);
  cp.n_batch = cp.n_ubatch = llama_n_batch(target);
  cp.n_seq_max = static_cast<uint32_t>(n_seq);
  cp.kv_unified = false;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
  cp.type_k = cp.type_v = static_cast<ggml_type>(options_.kv_type);  // as the plan counts it
  cp.n_threads = cp.n_threads_batch = llama_n_threads(target);
  cp.no_perf = true;
  cp.ctx_other = target;  // an EAGLE3 draft reads the target's hidden states
  draft_->ctx = llama_init_from_model(draft_->model, cp);
  if (draft_->ctx == nullptr) {
    const std::string why = take_last_llama_error();
    return Status::resource_exhausted("draft model " + path + ": creating its context of " + std::to_string(cp.n_ctx) +
                                      " tokens failed" + (why.empty() ? "" : ": " + why));
  }
  return Status::ok();
}

Status Speculator::start_tapped_eagle3(llama_context* target, int n_seq) {
  const llama_model* target_model = llama_get_model(target);
  const std::string context = "draft model " + options_.draft_model;
  TANDEM_RETURN_IF_ERROR(tap_->watch(Eagle3Drafter::target_layers(draft_->model), llama_model_n_layer(target_model),
                                     llama_model_n_embd(target_model))
                             .with_context(context));
  // Sampled as llama.cpp's driver samples its EAGLE3 drafts.
  const common_params_speculative_draft defaults;
  Eagle3DrafterOptions eo;
  eo.n_seq = n_seq;
  eo.n_max = options_.draft_max;
  eo.p_min = defaults.p_min;
  eo.backend_sampling = defaults.backend_sampling;
  auto drafter = Eagle3Drafter::create(draft_->ctx, target_model, eo);
  if (!drafter.is_ok()) return drafter.status().with_context(context);
  eagle3_ = std::move(drafter.value());
  log::info("engine", "speculative decoding: the EAGLE3 draft reads the " + architecture(target_model) +
                          " target's hidden states through a tap on its graph's callback");
  return Status::ok();
}

common_speculative_draft_params& Speculator::draft_params(int seq) {
  return eagle3_ ? eagle3_->params(seq) : common_speculative_get_draft_params(spec_, seq);
}

Result<std::unique_ptr<Speculator>> Speculator::create(const SpeculationOptions& o, llama_context* target, int n_seq,
                                                       std::unique_ptr<Eagle3Tap> tap) {
  TANDEM_RETURN_IF_ERROR(check_speculation_mode(o.mode));
  if (o.mode == "off") return std::unique_ptr<Speculator>();
  if (o.draft_max < 1 || o.draft_max > 32)
    return Status::invalid_argument("draft_max must be in [1, 32], got " + std::to_string(o.draft_max));
  std::unique_ptr<Speculator> s(new Speculator(o, n_seq));
  s->tap_ = std::move(tap);
  common_params_speculative params;
  params.draft.n_max = o.draft_max;
  params.draft.n_min = 0;
  // llama.cpp's n-gram map, keys only: the draft is what followed the last occurrence of the
  // sequence's last kNgramKey tokens, found through a map of the sequence's n-grams.
  params.ngram_map_k.size_n = kNgramKey;
  params.ngram_map_k.size_m = static_cast<uint16_t>(o.draft_max);
  params.ngram_map_k.min_hits = 1;
  if (o.mode == "ngram") {
    params.types = {COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K};
  } else {
    TANDEM_RETURN_IF_ERROR(s->load_draft(target, n_seq));
    params.types = {s->draft_->eagle3 ? COMMON_SPECULATIVE_TYPE_DRAFT_EAGLE3 : COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE};
    params.draft.mparams.path = o.draft_model;
    params.draft.ctx_tgt = target;
    params.draft.ctx_dft = s->draft_->ctx;
  }
  if (s->draft_ && s->draft_->eagle3 && s->tap_) TANDEM_RETURN_IF_ERROR(s->start_tapped_eagle3(target, n_seq));
  try {
    if (!s->eagle3_) s->spec_ = common_speculative_init(params, static_cast<uint32_t>(n_seq));
  } catch (const std::exception& e) {
    return Status::invalid_argument("speculative decoding '" + o.mode + "'" +
                                    (o.mode == "draft" ? " with " + o.draft_model : std::string()) + ": " + e.what());
  }
  if (s->spec_ == nullptr && !s->eagle3_) return Status::internal("llama.cpp's speculative decoding did not start");
  if (o.synth_len > 0) {
    auto probs = synthetic_probs(o.synth_len, o.draft_max);
    if (!probs.is_ok()) return probs.status();
    s->synth_probs_ = std::move(probs.value());
    s->stats_.synth_len = o.synth_len;
    log::warn("engine", "synthetic acceptance (benchmarks only): drafted tokens are kept at random for " +
                            std::to_string(o.synth_len) + " tokens a step on average; the text is not the model's");
  }
  log::info("engine",
            "speculative decoding: " + o.mode +
                (s->draft_ ? std::string(s->draft_->eagle3 ? " (EAGLE3 draft " : " (draft ") + o.draft_model + ")"
                           : std::string(" (n-gram key of ") + std::to_string(kNgramKey) + " tokens)") +
                ", up to " + std::to_string(o.draft_max) + " tokens a step");
  return s;
}

void Speculator::begin(int seq, const std::vector<int>& held) {
  if (spec_ != nullptr) common_speculative_begin(spec_, seq, std::vector<llama_token>(held.begin(), held.end()));
}

void Speculator::want_draft(int seq, const std::vector<int>* held, int last, int pos, int n_max,
                            std::vector<int>* out) {
  out->clear();
  auto& dp = draft_params(seq);
  dp.drafting = true;
  dp.n_max = n_max;
  dp.pos0 = pos;
  dp.id_last = last;
  dp.prompt = held;
  dp.result = out;
}

void Speculator::draft_all() {
  const auto t0 = std::chrono::steady_clock::now();
  if (eagle3_) {
    eagle3_->draft();
  } else {
    common_speculative_draft(spec_);
  }
  stats_.draft_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!draft_) return;
  // Drafting decoded its proposals into the draft's streams; the target's batch brings them back
  // through process(), after the positions the target holds.
  llama_memory_t mem = llama_get_memory(draft_->ctx);
  for (int seq = 0; seq < n_seq_; ++seq) {
    auto& dp = draft_params(seq);
    if (dp.result == nullptr) continue;
    llama_memory_seq_rm(mem, seq, dp.pos0, -1);
    dp.result = nullptr;
  }
}

bool Speculator::process(const llama_batch& batch) {
  if (failed_) return false;
  bool ok = false;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    ok = eagle3_ ? process_tapped(batch) : common_speculative_process(spec_, batch);
  } catch (const std::exception& e) {
    log::warn("engine", std::string("speculative decoding: the draft's step failed: ") + e.what());
  }
  stats_.draft_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!ok) {
    failed_ = true;
    log::warn("engine", "speculative decoding is off from now on: the draft model's decode failed");
  }
  return ok;
}

bool Speculator::process_tapped(const llama_batch& batch) {
  if (Status st = tap_->take(batch.n_tokens, &features_); !st.is_ok()) {
    log::warn("engine", "speculative decoding: the EAGLE3 tap: " + st.message());
    return false;
  }
  return eagle3_->process(batch, features_.data());
}

void Speculator::accept(int seq, int n_accepted) {
  if (eagle3_) {
    eagle3_->accept(seq, n_accepted);
  } else {
    common_speculative_accept(spec_, seq, static_cast<uint16_t>(n_accepted));
  }
}

void Speculator::cut(int seq, int pos) {
  if (!draft_) return;
  llama_memory_t mem = llama_get_memory(draft_->ctx);
  // llama.cpp takes a stream's next batch right after its last position, or anywhere when it is
  // empty: a stream that would not end at `pos` is emptied.
  if (!llama_memory_seq_rm(mem, seq, pos, -1) || llama_memory_seq_pos_max(mem, seq) + 1 != pos) {
    llama_memory_seq_rm(mem, seq, -1, -1);
  }
}

void Speculator::refill(int seq, const std::vector<int>& tokens) {
  if (!draft_ || failed_) return;
  cut(seq, 0);
  // An EAGLE3 draft reads the target's hidden states of each position, which a restored state
  // does not bring: its stream starts at the restored end, with less to go on.
  if (draft_->eagle3 || tokens.empty()) return;
  const int n_batch = static_cast<int>(llama_n_batch(draft_->ctx));
  llama_batch batch = llama_batch_init(n_batch, 0, 1);
  for (size_t i = 0; i < tokens.size() && !failed_;) {
    batch.n_tokens = 0;
    for (; i < tokens.size() && batch.n_tokens < n_batch; ++i) {
      common_batch_add(batch, tokens[i], static_cast<llama_pos>(i), {seq}, false);
    }
    if (llama_decode(draft_->ctx, batch) != 0) {
      log::warn("engine",
                "speculative decoding: the draft model could not read a restored prompt; its stream "
                "starts at the restored end");
      cut(seq, 0);
      break;
    }
  }
  llama_batch_free(batch);
}

void Speculator::count_step(int drafted, int accepted) {
  ++stats_.steps;
  stats_.drafted += static_cast<uint64_t>(drafted);
  stats_.accepted += static_cast<uint64_t>(accepted);
}

}  // namespace tandem::engine
