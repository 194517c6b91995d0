#include "engine/eagle3_drafter.h"

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "llama.h"
#include "sampling.h"
// llama.cpp's staging API, which its own speculative code uses for the same calls: the draft's
// pre-norm hidden states and the target layers an EAGLE3 model reads.
// pinned llama.cpp: text src/llama-ext.h LLAMA_API float * llama_get_embeddings_nextn_ith(struct llama_context * ctx, int32_t i);
#include "../src/llama-ext.h"

namespace tandem::engine {

// The state a sequence carries between calls: the position whose pair still waits for the token
// after it and its g, and the g rows of its last processed run (accept() picks the new waiting
// position among them).
struct Eagle3Drafter::Seq {
  std::vector<float> pending_g;
  llama_pos pending_pos = -1;
  std::vector<float> verify_g;
  llama_pos verify_first = -1;
  int verify_rows = 0;
};

std::vector<int32_t> Eagle3Drafter::target_layers(const llama_model* draft) {
  const int32_t* ids = llama_model_target_layer_ids(draft);
  return ids == nullptr ? std::vector<int32_t>()
                        : std::vector<int32_t>(ids, ids + llama_model_target_layer_ids_n(draft));
}

Eagle3Drafter::Eagle3Drafter(llama_context* draft, const Eagle3DrafterOptions& options)
    : ctx_(draft), options_(options) {}

Result<std::unique_ptr<Eagle3Drafter>> Eagle3Drafter::create(llama_context* draft, const llama_model* target,
                                                             const Eagle3DrafterOptions& o) {
  const llama_model* model = llama_get_model(draft);
  const uint32_t n_taps = llama_model_target_layer_ids_n(model);
  if (n_taps != 3)
    return Status::invalid_argument("an EAGLE3 draft reads 3 target layers, this one " + std::to_string(n_taps));
  std::unique_ptr<Eagle3Drafter> d(new Eagle3Drafter(draft, o));
  d->n_enc_ = static_cast<int>(n_taps) * llama_model_n_embd(target);
  d->n_dec_ = llama_model_n_embd(model);
  const int n_batch = static_cast<int>(llama_n_batch(draft));
  d->batch_ = llama_batch_init(n_batch, 0, 1);
  d->pair_embd_.resize(static_cast<size_t>(n_batch) * static_cast<size_t>(d->n_dec_));
  d->batch_.embd = d->pair_embd_.data();  // llama_batch_init makes one of token and embd; a pair needs both
  d->params_.resize(static_cast<size_t>(o.n_seq));
  d->seqs_.resize(static_cast<size_t>(o.n_seq));
  for (Seq& s : d->seqs_) s.pending_g.assign(static_cast<size_t>(d->n_dec_), 0.0f);
  // The draft's top 10 at each step, as llama.cpp's driver samples (the draft is the first).
  for (int seq = 0; seq < o.n_seq; ++seq) {
    common_params_sampling sp;
    sp.no_perf = false;
    sp.top_k = 10;
    sp.samplers = {COMMON_SAMPLER_TYPE_TOP_K};
    d->samplers_.push_back(common_sampler_init(model, sp));
    llama_sampler* chain = nullptr;
    if (o.backend_sampling) {
      chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
      llama_sampler_chain_add(chain, llama_sampler_init_top_k(10));
      if (!llama_set_sampler(draft, seq, chain)) {
        llama_sampler_free(chain);
        chain = nullptr;
      }
    }
    d->backend_chains_.push_back(chain);
  }
  // The encoder's output and each draft step's pre-norm hidden state, read back as g.
  llama_set_embeddings_nextn(draft, true, /*masked=*/true);
  return d;
}

Eagle3Drafter::~Eagle3Drafter() {
  for (size_t seq = 0; seq < backend_chains_.size(); ++seq) {
    if (backend_chains_[seq] == nullptr) continue;
    llama_set_sampler(ctx_, static_cast<llama_seq_id>(seq), nullptr);
    llama_sampler_free(backend_chains_[seq]);
  }
  for (common_sampler* s : samplers_) common_sampler_free(s);
  batch_.embd = nullptr;  // pair_embd_'s
  llama_batch_free(batch_);
}

void Eagle3Drafter::add(llama_token token, llama_pos pos, int seq, const float* g, bool logits) {
  const int i = batch_.n_tokens;
  common_batch_add(batch_, token, pos, {seq}, logits);
  std::memcpy(pair_embd_.data() + static_cast<size_t>(i) * static_cast<size_t>(n_dec_), g,
              static_cast<size_t>(n_dec_) * sizeof(float));
}

bool Eagle3Drafter::encode(const float* features, int n_tokens) {
  g_.resize(static_cast<size_t>(n_tokens) * static_cast<size_t>(n_dec_));
  // The encoder is one pass per token, so a batch beyond the draft's micro-batch goes in chunks.
  const int n_ubatch = static_cast<int>(llama_n_ubatch(ctx_));
  for (int i = 0; i < n_tokens; i += n_ubatch) {
    const int n = std::min(n_ubatch, n_tokens - i);
    llama_batch in = {};
    in.n_tokens = n;
    in.embd = const_cast<float*>(features + static_cast<size_t>(i) * static_cast<size_t>(n_enc_));
    if (llama_encode(ctx_, in) != 0) return false;
    const float* g = llama_get_embeddings_nextn(ctx_);
    if (g == nullptr) return false;
    std::memcpy(g_.data() + static_cast<size_t>(i) * static_cast<size_t>(n_dec_), g,
                static_cast<size_t>(n) * static_cast<size_t>(n_dec_) * sizeof(float));
  }
  return true;
}

bool Eagle3Drafter::process(const llama_batch& in, const float* features) {
  if (in.n_tokens <= 0 || in.token == nullptr || in.embd != nullptr) return true;
  const int n_seq = options_.n_seq;
  std::vector<int> beg(static_cast<size_t>(n_seq), -1), end(static_cast<size_t>(n_seq), -1);
  for (int k = 0; k < in.n_tokens; ++k) {
    if (in.n_seq_id[k] != 1) return false;
    const llama_seq_id seq = in.seq_id[k][0];
    if (seq < 0 || seq >= n_seq) continue;
    end[static_cast<size_t>(seq)] = k;
    if (beg[static_cast<size_t>(seq)] < 0) beg[static_cast<size_t>(seq)] = k;
  }
  if (!encode(features, in.n_tokens)) return false;
  const size_t row = static_cast<size_t>(n_dec_);
  batch_.n_tokens = 0;
  llama_memory_t mem = llama_get_memory(ctx_);
  for (int seq = 0; seq < n_seq; ++seq) {
    const int b = beg[static_cast<size_t>(seq)], e = end[static_cast<size_t>(seq)];
    if (b < 0) continue;
    Seq& s = seqs_[static_cast<size_t>(seq)];
    // The position left waiting by the last run gets this run's first token, unless the draft
    // step already paired it.
    if (s.pending_pos >= 0 && s.pending_pos + 1 == in.pos[b] && s.pending_pos > llama_memory_seq_pos_max(mem, seq)) {
      add(in.token[b], s.pending_pos, seq, s.pending_g.data(), false);
    }
    for (int k = b; k < e; ++k) add(in.token[k + 1], in.pos[k], seq, g_.data() + static_cast<size_t>(k) * row, false);
    s.verify_first = in.pos[b];
    s.pending_pos = in.pos[e];
    s.verify_rows = e - b + 1;
    s.verify_g.assign(g_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(b) * row),
                      g_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(e + 1) * row));
    std::memcpy(s.pending_g.data(), g_.data() + static_cast<size_t>(e) * row, row * sizeof(float));
  }
  return batch_.n_tokens == 0 || llama_decode(ctx_, batch_) == 0;
}

// The first draft step: each drafting sequence's waiting position with the target's latest sample.
// Returns how many sequences draft.
int Eagle3Drafter::seed(std::vector<bool>* drafting) {
  batch_.n_tokens = 0;
  int n = 0;
  for (int seq = 0; seq < options_.n_seq; ++seq) {
    const common_speculative_draft_params& dp = params_[static_cast<size_t>(seq)];
    Seq& s = seqs_[static_cast<size_t>(seq)];
    if (!dp.drafting || s.pending_pos < 0) continue;
    ++n;
    (*drafting)[static_cast<size_t>(seq)] = true;
    common_sampler_reset(samplers_[static_cast<size_t>(seq)]);
    llama_memory_seq_rm(llama_get_memory(ctx_), seq, s.pending_pos, -1);
    add(dp.id_last, s.pending_pos, seq, s.pending_g.data(), true);
  }
  return n;
}

// Samples step `step`'s token of every drafting sequence and batches the next step. False when
// the next step's decode failed or nothing is left to decode.
bool Eagle3Drafter::extend(std::vector<bool>* drafting, int* n_drafting, int step) {
  int i_batch = 0;
  batch_.n_tokens = 0;
  for (int seq = 0; seq < options_.n_seq; ++seq) {
    if (!(*drafting)[static_cast<size_t>(seq)]) continue;
    common_sampler* smpl = samplers_[static_cast<size_t>(seq)];
    common_sampler_sample(smpl, ctx_, i_batch, true);
    const float* prenorm = llama_get_embeddings_nextn_ith(ctx_, i_batch);  // this step's g for the next
    ++i_batch;
    const llama_token_data_array* cur = common_sampler_get_candidates(smpl, true);
    std::vector<llama_token>& result = *params_[static_cast<size_t>(seq)].result;
    const bool sure = cur->data[0].p >= options_.p_min;
    if (sure) {
      common_sampler_accept(smpl, cur->data[0].id, true);
      result.push_back(cur->data[0].id);
    }
    if (!sure || static_cast<int>(result.size()) >= options_.n_max) {
      (*drafting)[static_cast<size_t>(seq)] = false;
      --*n_drafting;
      continue;
    }
    add(cur->data[0].id, seqs_[static_cast<size_t>(seq)].pending_pos + step + 1, seq, prenorm, true);
  }
  return batch_.n_tokens > 0 && llama_decode(ctx_, batch_) == 0;
}

void Eagle3Drafter::draft() {
  std::vector<bool> drafting(static_cast<size_t>(options_.n_seq), false);
  int n_drafting = seed(&drafting);
  if (n_drafting > 0 && llama_decode(ctx_, batch_) == 0) {
    for (int step = 0; n_drafting > 0 && extend(&drafting, &n_drafting, step); ++step) {}
  }
  finish();
}

// As common_speculative_draft() ends: a sequence's own n_max cuts its draft, and no sequence is
// left drafting.
void Eagle3Drafter::finish() {
  for (common_speculative_draft_params& dp : params_) {
    if (!dp.drafting) continue;
    dp.drafting = false;
    if (dp.n_max > 0 && static_cast<int>(dp.result->size()) > dp.n_max)
      dp.result->resize(static_cast<size_t>(dp.n_max));
  }
}

void Eagle3Drafter::accept(int seq, int n_accepted) {
  if (seq < 0 || seq >= options_.n_seq) return;
  Seq& s = seqs_[static_cast<size_t>(seq)];
  if (s.verify_rows <= 0) return;
  const int i = std::min(n_accepted, s.verify_rows - 1);
  s.pending_pos = s.verify_first + i;
  std::memcpy(s.pending_g.data(), s.verify_g.data() + static_cast<size_t>(i) * static_cast<size_t>(n_dec_),
              static_cast<size_t>(n_dec_) * sizeof(float));
}

}  // namespace tandem::engine
