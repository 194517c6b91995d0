#include "engine/slot.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common.h"
#include "llama.h"

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

void Slot::start(std::unique_ptr<Job> job, llama_context* ctx) {
  size_t keep = common_prefix(job->prompt);
  if (keep == job->prompt.size()) --keep;
  llama_memory_t mem = llama_get_memory(ctx);
  if (!llama_memory_seq_rm(mem, seq_id_, static_cast<llama_pos>(keep), -1)) {
    // A memory that cannot cut a sequence in the middle starts over.
    llama_memory_seq_rm(mem, seq_id_, -1, -1);
    keep = 0;
  }
  cache_.resize(keep);
  saved_ = false;
  job_ = std::move(job);
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

int Slot::add_to_batch(llama_batch& batch, int budget) {
  if (!job_ || budget <= 0) return 0;
  if (next_ >= 0) {
    logits_index_ = batch.n_tokens;
    common_batch_add(batch, next_, static_cast<llama_pos>(cache_.size()), {seq_id_}, true);
    cache_.push_back(next_);
    next_ = -1;
    return 1;
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

bool Slot::after_decode(llama_context* ctx) {
  if (!job_ || logits_index_ < 0) return false;
  const int idx = logits_index_;
  logits_index_ = -1;
  const llama_token token = n_generated_ < static_cast<int>(job_->forced.size())
                                ? job_->forced[static_cast<size_t>(n_generated_)]
                                : common_sampler_sample(job_->sampler.get(), ctx, idx);
  common_sampler_accept(job_->sampler.get(), token, true);
  ++n_generated_;
  if (job_->return_tokens) generated_.push_back(token);
  const llama_vocab* vocab = llama_model_get_vocab(llama_get_model(ctx));
  if (!job_->ignore_eos && llama_vocab_is_eog(vocab, token)) {
    finish("stop");
    return true;
  }
  if (job_->n_probs >= 0) logprobs_.push_back(token_logprob(ctx, idx, token, job_->n_probs));
  const bool stopped = text_.append(common_token_to_piece(vocab, token, job_->shown_special.count(token) > 0));
  if (stopped) {
    finish("stop");
  } else if (n_generated_ >= job_->max_tokens || static_cast<int>(cache_.size()) + 1 >= n_ctx_) {
    finish("length");
  } else {
    emit(text_.take_ready(), false);
    next_ = token;
  }
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
  job->on_event(e);
}

void Slot::drop_cache(llama_context* ctx) {
  llama_memory_seq_rm(llama_get_memory(ctx), seq_id_, -1, -1);
  cache_.clear();
  saved_ = false;
}

}  // namespace tandem::engine
