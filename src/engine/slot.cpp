#include "engine/slot.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common.h"
#include "engine/speculation.h"
#include "llama.h"
#include "sampling.h"

namespace tandem::engine {
namespace {

// The log-probability of `token` and the `n_top` most likely tokens under the model's raw
// distribution at batch index `idx` (before temperature, top-k or a grammar), as llama-server and
// OpenAI report them.
TokenLogprob token_logprob(llama_context* ctx, int idx, llama_token token, int n_top) {
  const llama_vocab* vocab = llama_model_get_vocab(llama_get_model(ctx));
  const int n_vocab = llama_vocab_n_tokens(vocab);
  const float* logits = llama_get_logits_ith(ctx, idx);
  const float max = *std::max_element(logits, logits + n_vocab);
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - max));
  const double lse = max + std::log(sum);
  auto entry = [&](llama_token t) {
    return TopLogprob{t, common_token_to_piece(vocab, t, true), static_cast<float>(logits[t] - lse)};
  };
  TokenLogprob lp;
  lp.token = entry(token);
  n_top = std::min(n_top, n_vocab);
  if (n_top > 0) {
    std::vector<llama_token> ids(static_cast<size_t>(n_vocab));
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + n_top, ids.end(),
                      [&](llama_token a, llama_token b) { return logits[a] > logits[b]; });
    for (int i = 0; i < n_top; ++i) lp.top.push_back(entry(ids[static_cast<size_t>(i)]));
  }
  return lp;
}

}  // namespace

size_t Slot::common_prefix(const std::vector<llama_token>& prompt) const {
  size_t n = 0;
  while (n < cache_.size() && n < prompt.size() && cache_[n] == prompt[n]) ++n;
  return n;
}

void Slot::start(std::unique_ptr<Job> job, llama_context* ctx, Speculator* spec) {
  size_t keep = common_prefix(job->prompt);
  if (keep == job->prompt.size()) --keep;
  llama_memory_t mem = llama_get_memory(ctx);
  if (!llama_memory_seq_rm(mem, seq_id_, static_cast<llama_pos>(keep), -1)) {
    // A memory that cannot cut a sequence in the middle starts over.
    llama_memory_seq_rm(mem, seq_id_, -1, -1);
    keep = 0;
  }
  cache_.resize(keep);
  draft_.clear();
  if (spec != nullptr) {
    spec->cut(seq_id_, static_cast<int>(keep));
    spec->begin(seq_id_, cache_);
  }
  saved_ = false;
  job_ = std::move(job);
  chance_.seed(common_sampler_get_seed(job_->sampler.get()));
  text_ = TextStream(job_->stops);
  logits_index_ = -1;
  next_ = -1;
  n_generated_ = 0;
  generated_.clear();
  logprobs_.clear();
  n_cached_ = static_cast<int>(keep);
  EngineEvent started;
  started.type = EngineEvent::Type::started;
  started.id = job_->id;
  started.usage = {static_cast<int>(job_->prompt.size()), 0, n_cached_};
  job_->on_event(started);
}

bool Slot::want_draft(Speculator& spec, int n_max) {
  draft_.clear();
  if (!generating() || n_generated_ < static_cast<int>(job_->forced.size())) return false;
  if (job_->draft_max >= 0) n_max = std::min(n_max, job_->draft_max);  // the request's own cap
  // Room for the tokens it may keep: the job's limit and the context, as decoding one by one has.
  n_max = std::min({n_max, job_->max_tokens - n_generated_ - 1, n_ctx_ - 2 - static_cast<int>(cache_.size()) - 1});
  if (n_max < 1) return false;
  spec.want_draft(seq_id_, &cache_, next_, static_cast<int>(cache_.size()), n_max, &draft_);
  return true;
}

int Slot::add_to_batch(llama_batch& batch, int budget) {
  if (!job_ || budget <= 0) return 0;
  if (next_ >= 0) {
    logits_index_ = batch.n_tokens;
    draft_idxs_.clear();
    for (size_t i = 0; i <= draft_.size(); ++i) {
      const llama_token t = i == 0 ? next_ : draft_[i - 1];
      draft_idxs_.push_back(batch.n_tokens);
      common_batch_add(batch, t, static_cast<llama_pos>(cache_.size()), {seq_id_}, true);
      cache_.push_back(t);
    }
    next_ = -1;
    return static_cast<int>(draft_idxs_.size());
  }
  if (logits_index_ >= 0) return 0;  // waiting for the sample of the last prompt token
  const size_t end = std::min(job_->prompt.size(), cache_.size() + static_cast<size_t>(budget));
  const int added = static_cast<int>(end - cache_.size());
  for (size_t i = cache_.size(); i < end; ++i) {
    const bool last = i + 1 == job_->prompt.size();
    if (last) logits_index_ = batch.n_tokens;
    common_batch_add(batch, job_->prompt[i], static_cast<llama_pos>(i), {seq_id_}, last);
    cache_.push_back(job_->prompt[i]);
  }
  return added;
}

int Slot::after_decode(llama_context* ctx, Speculator* spec) {
  if (!job_ || logits_index_ < 0) return 0;
  const int idx = logits_index_;
  logits_index_ = -1;
  if (draft_.empty() || spec == nullptr) {
    if (!draft_.empty()) {  // drafted, then the speculator failed: the draft goes unchecked
      cache_.resize(cache_.size() - draft_.size());
      llama_memory_seq_rm(llama_get_memory(ctx), seq_id_, static_cast<llama_pos>(cache_.size()), -1);
    }
    const size_t held = cache_.size();
    const llama_token token = n_generated_ < static_cast<int>(job_->forced.size())
                                  ? job_->forced[static_cast<size_t>(n_generated_)]
                                  : common_sampler_sample(job_->sampler.get(), ctx, idx);
    common_sampler_accept(job_->sampler.get(), token, true);
    draft_.clear();
    take_token(ctx, idx, token, held);
    return 1;
  }
  // The target's own sample at each position, as long as it matches the draft (llama.cpp's rule:
  // with sampling too, every kept token is the target's sample), and one after the last match.
  const std::vector<llama_token> kept =
      spec->synth_probs().empty() ? common_sampler_sample_and_accept_n(job_->sampler.get(), ctx, draft_idxs_, draft_)
                                  : keep_by_chance(ctx, spec->synth_probs());
  const int n_accepted = static_cast<int>(kept.size()) - 1;
  spec->accept(seq_id_, n_accepted);
  spec->count_step(static_cast<int>(draft_.size()), n_accepted);
  // The stream keeps next_ and the drafts the target agreed with; the rest goes, here and in the
  // draft model's stream.
  const size_t first = cache_.size() - draft_.size() - 1;  // next_'s position
  const size_t keep = first + 1 + static_cast<size_t>(n_accepted);
  llama_memory_seq_rm(llama_get_memory(ctx), seq_id_, static_cast<llama_pos>(keep), -1);
  spec->cut(seq_id_, static_cast<int>(keep));
  cache_.resize(keep);
  draft_.clear();
  int taken = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    ++taken;
    if (!take_token(ctx, draft_idxs_[i], kept[i], first + 1 + i)) break;
  }
  return taken;
}

std::vector<llama_token> Slot::keep_by_chance(llama_context* ctx, const std::vector<double>& probs) {
  common_sampler* sampler = job_->sampler.get();
  const llama_vocab* vocab = llama_model_get_vocab(llama_get_model(ctx));
  std::uniform_real_distribution<double> draw(0.0, 1.0);
  std::vector<llama_token> kept;
  for (size_t i = 0; i <= draft_.size(); ++i) {
    // The model samples every row it checks, as it would; a kept drafted token stands in for it.
    const llama_token sampled = common_sampler_sample(sampler, ctx, draft_idxs_[i]);
    // A drafted end of generation is never kept: it would end the request early.
    const bool keep =
        i < draft_.size() && i < probs.size() && draw(chance_) < probs[i] && !llama_vocab_is_eog(vocab, draft_[i]);
    const llama_token token = keep ? draft_[i] : sampled;
    // A grammar need not allow a token the model did not choose: only the model's advance it.
    common_sampler_accept(sampler, token, !keep);
    kept.push_back(token);
    if (!keep) break;
  }
  return kept;
}

bool Slot::take_token(llama_context* ctx, int idx, llama_token token, size_t held) {
  ++n_generated_;
  if (job_->return_tokens) generated_.push_back(token);
  const llama_vocab* vocab = llama_model_get_vocab(llama_get_model(ctx));
  if (!job_->ignore_eos && llama_vocab_is_eog(vocab, token)) {
    finish("stop");
    return false;
  }
  if (job_->n_probs >= 0) logprobs_.push_back(token_logprob(ctx, idx, token, job_->n_probs));
  const bool stopped = text_.append(common_token_to_piece(vocab, token, job_->shown_special.count(token) > 0));
  if (stopped) {
    finish("stop");
    return false;
  }
  if (n_generated_ >= job_->max_tokens || static_cast<int>(held) + 1 >= n_ctx_) {
    finish("length");
    return false;
  }
  emit(text_.take_ready(), false);
  next_ = token;
  return true;
}

void Slot::emit(const std::string& ready, bool final) {
  EngineEvent e;
  e.type = EngineEvent::Type::delta;
  e.id = job_->id;
  if (job_->chat) {
    if (!ready.empty() || final) job_->chat->update(std::string(text_.emitted()), !final, &e);
  } else {
    e.text = ready;
  }
  if (!e.text.empty() || !e.reasoning.empty() || !e.tool_calls.empty()) {
    e.logprobs = std::move(logprobs_);  // the tokens behind this text (and any held back before)
    logprobs_.clear();
    job_->on_event(e);
  }
}

void Slot::finish(const char* reason) {
  emit(text_.take_rest(), true);
  EngineEvent done;
  done.type = EngineEvent::Type::done;
  done.id = job_->id;
  done.finish_reason = reason;
  done.stop_sequence = text_.matched_stop();
  if (done.finish_reason == "stop" && job_->chat && job_->chat->has_tool_calls()) done.finish_reason = "tool_calls";
  done.usage = {static_cast<int>(job_->prompt.size()), n_generated_, n_cached_};
  done.tokens.assign(generated_.begin(), generated_.end());
  done.logprobs = std::move(logprobs_);  // tokens whose text never became a delta (a stop string)
  logprobs_.clear();
  // Free the slot before telling anyone, so a new request may already take it.
  std::unique_ptr<Job> job = std::move(job_);
  next_ = -1;
  job->on_event(done);
}

void Slot::fail(const Status& error) {
  if (!job_) return;
  EngineEvent e;
  e.type = EngineEvent::Type::error;
  e.id = job_->id;
  e.code = error.code();
  e.message = error.message();
  std::unique_ptr<Job> job = std::move(job_);
  next_ = -1;
  logits_index_ = -1;
  draft_.clear();
  job->on_event(e);
}

void Slot::drop_cache(llama_context* ctx, Speculator* spec) {
  llama_memory_seq_rm(llama_get_memory(ctx), seq_id_, -1, -1);
  if (spec != nullptr) spec->cut(seq_id_, 0);
  cache_.clear();
  saved_ = false;
}

}  // namespace tandem::engine
