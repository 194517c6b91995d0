#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "common.h"
#include "common/cpu_cores.h"
#include "common/host_memory.h"
#include "common/log.h"
#include "common/units.h"
#include "engine/eagle3_tap.h"
#include "engine/llama_log.h"
#include "engine/request.h"
#include "engine/slot.h"
#include "llama.h"
#include "plan/memory_model.h"

namespace tandem::engine {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

constexpr double kRateWindowS = 5.0;

void fail_job(Job& job, const Status& error) {
  EngineEvent e;
  e.type = EngineEvent::Type::error;
  e.id = job.id;
  e.code = error.code();
  e.message = error.message();
  job.on_event(e);
}

// One prompt step of up to 32 tokens (past the 8 rows below which CUDA's quantized matrix kernels
// take another path) and one single-token step, on sequence 0, then nothing of them left in the
// cache. The tokens' content does not matter: every kernel a request will use gets loaded.
Status warm_up(llama_context* ctx, const llama_model* model, int batch_size, int context) {
  const auto t0 = std::chrono::steady_clock::now();
  const int n = std::max(1, std::min({32, batch_size, context - 1}));
  llama_token token = llama_vocab_bos(llama_model_get_vocab(model));
  if (token == LLAMA_TOKEN_NULL) token = 0;
  llama_batch batch = llama_batch_init(n, 0, 1);
  Status status;
  for (int step = 0; step < 2 && status.is_ok(); ++step) {
    const int count = step == 0 ? n : 1;
    batch.n_tokens = count;
    for (int i = 0; i < count; ++i) {
      batch.token[i] = token;
      batch.pos[i] = step == 0 ? i : n;
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = i == count - 1;
    }
    if (const int rc = llama_decode(ctx, batch); rc != 0) {
      const std::string reason = take_last_llama_error();
      status = Status::internal("the warm-up's " + std::string(step == 0 ? "prompt" : "decode") +
                                " step failed: llama_decode returned " + std::to_string(rc) +
                                (reason.empty() ? "" : ": " + reason));
    }
  }
  llama_batch_free(batch);
  llama_memory_clear(llama_get_memory(ctx), true);
  if (status.is_ok()) {
    char line[160];
    std::snprintf(line, sizeof line,
                  "warm-up: a %d-token prompt step and a decode step in %.0f ms (not paid by the first request)", n,
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    log::info("engine", line);
  }
  return status;
}

}  // namespace

void Scheduler::BatchDeleter::operator()(llama_batch* b) const {
  llama_batch_free(*b);
  delete b;
}

Result<std::unique_ptr<Scheduler>> Scheduler::create(llama_model* model, const SchedulerOptions& o,
                                                     StateShares* shares) {
  if (o.parallel < 1 || o.parallel > 256)
    return Status::invalid_argument("parallel must be in [1, 256], got " + std::to_string(o.parallel));
  if (o.context < 16)
    return Status::invalid_argument("context must be at least 16 tokens, got " + std::to_string(o.context));
  if (o.batch < o.parallel)
    return Status::invalid_argument("batch (" + std::to_string(o.batch) + ") must hold one token of each slot (" +
                                    std::to_string(o.parallel) + ")");
  auto chat = ChatTemplates::load(model);
  if (!chat.is_ok()) return chat.status();
  PromptCacheOptions pco;
  pco.max_bytes = o.prompt_cache_bytes;
  pco.disk_dir = o.prompt_cache_dir;
  pco.disk_max_bytes = o.prompt_cache_dir_bytes;
  pco.shares = shares;
  auto cache = PromptCache::create(std::move(pco));
  if (!cache.is_ok()) return cache.status();
  const int threads = o.threads > 0 ? o.threads : physical_cores();
  auto kv_type = plan::parse_kv_type(o.kv_type);
  if (!kv_type.is_ok()) return kv_type.status().with_context("kv_type");
  llama_context_params cp = llama_context_default_params();
  cp.type_k = cp.type_v = static_cast<ggml_type>(kv_type.value());
  cp.n_ctx = static_cast<uint32_t>(o.context) * static_cast<uint32_t>(o.parallel);
  cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(o.batch);
  cp.n_seq_max = static_cast<uint32_t>(o.parallel);
  cp.kv_unified = false;                               // one KV stream per slot (MSA needs it)
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;  // MiniMax-M3's sparse attention needs it
  cp.n_threads = cp.n_threads_batch = threads;
  cp.no_perf = true;
  // An EAGLE3 draft on a target whose graph does not record the hidden states it reads: a tap on
  // the graph's callback, which only a context's creation can set.
  std::unique_ptr<Eagle3Tap> tap;
  if (o.speculation.mode == "draft") tap = Eagle3Tap::for_draft(o.speculation.draft_model, model);
  if (tap) tap->install(&cp);
  take_last_llama_error();
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) {
    const std::string reason = take_last_llama_error();
    return Status::resource_exhausted("creating the context failed: " + std::to_string(o.parallel) + " slots × " +
                                      std::to_string(o.context) + " tokens (KV cache " + o.kv_type +
                                      ", flash attention on, batch " + std::to_string(o.batch) + ")" +
                                      (reason.empty() ? "" : ": " + reason));
  }
  SchedulerOptions actual = o;
  actual.context = static_cast<int>(llama_n_ctx_seq(ctx));
  actual.threads = threads;
  // llama.cpp clamps the batch to the context; a fuller decode would hit its assert.
  actual.batch = std::min<int>(o.batch, static_cast<int>(llama_n_batch(ctx)));
  if (actual.batch < actual.parallel) actual.batch = actual.parallel;
  if (o.warm_up) {
    if (Status st = warm_up(ctx, model, actual.batch, actual.context); !st.is_ok()) {
      llama_free(ctx);
      return st;
    }
  }
  SpeculationOptions speculation = o.speculation;
  speculation.kv_type = kv_type.value();
  auto speculator = Speculator::create(speculation, ctx, actual.parallel, std::move(tap));
  if (!speculator.is_ok()) {
    llama_free(ctx);
    return speculator.status();
  }
  return std::unique_ptr<Scheduler>(new Scheduler(model, ctx, actual, std::move(chat.value()), std::move(cache.value()),
                                                  std::move(speculator.value())));
}

Scheduler::Scheduler(llama_model* model, llama_context* ctx, const SchedulerOptions& options, ChatTemplates chat,
                     std::unique_ptr<PromptCache> prompt_cache, std::unique_ptr<Speculator> speculator)
    : model_(model),
      ctx_(ctx),
      options_(options),
      chat_(std::move(chat)),
      prompt_cache_(std::move(prompt_cache)),
      speculator_(std::move(speculator)) {
  prompt_cache_stats_ = prompt_cache_->stats();
  for (int i = 0; i < options_.parallel; ++i) slots_.push_back(std::make_unique<Slot>(i, options_.context));
  batch_.reset(new llama_batch(llama_batch_init(options_.batch, 0, 1)));
  thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  slots_.clear();
  prompt_cache_->clear();  // its workers' shares are addressed through KV tensors that llama_free frees
  speculator_.reset();     // its draft context reads the target's
  batch_.reset();
  llama_free(ctx_);
}

Status Scheduler::submit(const std::string& id, RequestKind kind, const std::string& body, EventCallback on_event) {
  if (id.empty()) return Status::invalid_argument("the request id is empty");
  nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return Status::invalid_argument("the request body is not valid JSON");
  ModelFacts facts{model_, &chat_, options_.context};
  auto job = prepare_job(kind, parsed, facts);
  if (!job.is_ok()) return job.status();
  job.value()->id = id;
  // Terminal events release the id; they always arrive on the decode thread.
  job.value()->on_event = [this, id, cb = std::move(on_event)](const EngineEvent& e) {
    if (e.type == EngineEvent::Type::done || e.type == EngineEvent::Type::error) {
      int busy = 0;
      for (const auto& s : slots_) busy += s->busy() ? 1 : 0;
      std::lock_guard<std::mutex> lock(mutex_);
      active_ids_.erase(std::remove(active_ids_.begin(), active_ids_.end(), id), active_ids_.end());
      busy_ = busy;
    }
    cb(e);
  };
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return Status::unavailable("the engine is shutting down");
    if (std::find(active_ids_.begin(), active_ids_.end(), id) != active_ids_.end()) {
      return Status::invalid_argument("request id '" + id + "' is already in use");
    }
    active_ids_.push_back(id);
    waiting_.push_back(std::move(job.value()));
  }
  wake_.notify_all();
  return Status::ok();
}

void Scheduler::cancel(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancels_.push_back(id);
  }
  wake_.notify_all();
}

std::vector<int32_t> Scheduler::tokenize(const std::string& text, bool add_special, bool parse_special) const {
  const auto ids = common_tokenize(llama_model_get_vocab(model_), text, add_special, parse_special);
  return {ids.begin(), ids.end()};
}

std::string Scheduler::token_piece(int32_t token) const {
  return common_token_to_piece(llama_model_get_vocab(model_), token, true);
}

Result<std::string> Scheduler::detokenize(const std::vector<int32_t>& tokens) const {
  const llama_vocab* vocab = llama_model_get_vocab(model_);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= n_vocab) {
      return Status::invalid_argument("tokens[" + std::to_string(i) + "] = " + std::to_string(tokens[i]) +
                                      " is not a token id in [0, " + std::to_string(n_vocab - 1) + "]");
    }
  }
  // Special tokens are shown as their text, as llama-server's /detokenize does.
  return common_detokenize(vocab, std::vector<llama_token>(tokens.begin(), tokens.end()), /*special=*/true);
}

Result<RenderedPrompt> Scheduler::render_prompt(RequestKind kind, const std::string& body) const {
  nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return Status::invalid_argument("the request body is not valid JSON");
  return render_prompt_only(kind, parsed, ModelFacts{model_, &chat_, options_.context});
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  SchedulerStats s;
  s.busy = busy_;
  s.total = options_.parallel;
  s.waiting = static_cast<int>(waiting_.size());
  s.tokens_generated = tokens_generated_;
  s.prompt_cache = prompt_cache_stats_;
  s.speculative = options_.speculation.mode;
  s.speculation = speculation_stats_;
  const double now = now_s();
  int sum = 0;
  double first = now;
  for (const auto& [t, n] : recent_) {
    if (t < now - kRateWindowS) continue;
    sum += n;
    first = std::min(first, t);
  }
  s.tokens_per_s = sum > 0 ? sum / std::max(1.0, now - first) : 0.0;
  return s;
}

bool Scheduler::idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return busy_ == 0 && waiting_.empty() && !stopping_;
}

bool Scheduler::wait_for_work() {
  std::unique_lock<std::mutex> lock(mutex_);
  wake_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !cancels_.empty() || busy_ > 0; });
  return !stopping_;
}

void Scheduler::run() {
  while (wait_for_work()) {
    take_cancellations();
    assign_waiting();
    step();
    // Saved while nothing waits, a state costs the next request nothing when it takes the slot.
    if (prompt_cache_->enabled()) save_idle_slots();
  }
  const Status down = Status::unavailable("the engine is shutting down");
  for (auto& s : slots_) s->fail(down);
  std::deque<std::unique_ptr<Job>> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    left.swap(waiting_);
  }
  for (auto& job : left) fail_job(*job, down);
}

void Scheduler::take_cancellations() {
  std::vector<std::string> ids;
  std::vector<std::unique_ptr<Job>> queued;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ids.swap(cancels_);
    for (const auto& id : ids) {
      auto it = std::find_if(waiting_.begin(), waiting_.end(), [&](const auto& j) { return j->id == id; });
      if (it == waiting_.end()) continue;
      queued.push_back(std::move(*it));
      waiting_.erase(it);
    }
  }
  const Status cancelled = Status::cancelled("the request was cancelled");
  for (auto& job : queued) fail_job(*job, cancelled);
  for (const auto& id : ids) {
    for (auto& s : slots_) {
      if (s->busy() && s->job_id() == id) s->fail(cancelled);
    }
  }
}

void Scheduler::assign_waiting() {
  for (;;) {
    std::unique_ptr<Job> job;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (waiting_.empty()) return;
      const bool any_free = std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return !s->busy(); });
      if (!any_free) return;
      job = std::move(waiting_.front());
      waiting_.pop_front();
    }
    // The free slot whose KV stream shares the longest prefix; the lowest one on a tie, which
    // keeps busy slots contiguous (llama.cpp batches consecutive sequence ids together).
    Slot* best = nullptr;
    size_t best_prefix = 0;
    for (auto& s : slots_) {
      if (s->busy()) continue;
      const size_t p = s->common_prefix(job->prompt);
      if (best == nullptr || p > best_prefix) best = s.get(), best_prefix = p;
    }
    if (prompt_cache_->enabled()) use_prompt_cache(*best, best_prefix, job->prompt);
    best->start(std::move(job), ctx_, speculator_.get());
    std::lock_guard<std::mutex> lock(mutex_);
    ++busy_;
    prompt_cache_stats_ = prompt_cache_->stats();
  }
}

void Scheduler::use_prompt_cache(Slot& slot, size_t held_prefix, const std::vector<int32_t>& prompt) {
  if (prompt.empty()) return;
  PromptCache::Taken cached;
  const bool found = prompt_cache_->take(prompt, held_prefix, &cached);
  if (!slot.saved() && slot.held().size() > (found ? 0 : held_prefix)) save_slot(slot);
  if (!found) return;
  const size_t prefix = std::min(cached.prefix, prompt.size() - 1);  // the last prompt token runs again
  std::string why;
  if (slot.restore_state(ctx_, std::move(cached.tokens), cached.state, prompt_cache_->shares(), &why)) {
    prompt_cache_->count_restored(prefix);
    if (speculator_) speculator_->refill(slot.seq_id(), slot.held());
  } else {
    prompt_cache_->count_failed_restore();
    log::warn("engine", "prompt cache: a cached state of " + std::to_string(cached.prefix) +
                            " matching tokens could not be restored (" + why + "); the prompt is evaluated");
  }
  prompt_cache_->discard(cached.state);
}

void Scheduler::save_slot(Slot& slot) {
  // Whatever comes of it, this content is not tried again: a save that failed would fail again.
  slot.set_saved();
  // Shorter states cost less to evaluate again than to keep and copy.
  constexpr size_t kMinSavedTokens = 64;
  if (slot.held().size() < kMinSavedTokens) return;
  std::string why;
  SavedState state = slot.save_state(ctx_, next_state_key_++, prompt_cache_->shares(), &why);
  if (state.size == 0) {
    if (!why.empty()) log::warn("engine", "prompt cache: a state was not kept: " + why);
    return;
  }
  // The states are host memory that grows after the load: older ones go before this machine runs
  // short, and this one too when that is not enough.
  while (available_host_memory() < kHostMemoryReserve && prompt_cache_->evict_one()) {}
  if (available_host_memory() < kHostMemoryReserve) {
    log::warn("engine", "prompt cache: a state of " + format_bytes(state.head_bytes()) +
                            " was not kept: this machine has less than " + format_bytes(kHostMemoryReserve) +
                            " of memory available");
    prompt_cache_->discard(state);
    return;
  }
  prompt_cache_->put(slot.held(), std::move(state));
}

void Scheduler::save_idle_slots() {
  bool saved = false;
  for (auto& s : slots_) {
    if (s->busy() || s->saved()) continue;
    // A request that came in goes first: one save at most stands before it (a slot it takes over
    // unsaved is saved then, if it must be).
    if (!idle()) break;
    save_slot(*s);
    saved = true;
  }
  if (!saved) return;
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_cache_stats_ = prompt_cache_->stats();
}

void Scheduler::draft() {
  // Each slot's verify rows stay within its share of the batch.
  const int share = std::max(1, options_.batch / options_.parallel) - 1;
  const int n_max = std::min(options_.speculation.draft_max, share);
  bool any = false;
  for (auto& s : slots_) any = s->want_draft(*speculator_, n_max) || any;
  if (any) speculator_->draft_all();
}

void Scheduler::step() {
  llama_batch& batch = *batch_;
  batch.n_tokens = 0;
  if (speculator_ && speculator_->working()) draft();
  // Every generating slot gets its tokens in; prompts share what is left of the batch.
  int prompt_budget = options_.batch;
  for (auto& s : slots_) prompt_budget -= s->generating_tokens();
  std::vector<Slot*> in_batch;
  for (auto& s : slots_) {
    const bool gen = s->generating();
    int budget = gen ? s->generating_tokens() : prompt_budget;
    if (!gen && options_.max_prompt_chunk > 0) budget = std::min(budget, options_.max_prompt_chunk);
    const int added = s->add_to_batch(batch, budget);
    if (!gen) prompt_budget -= added;
    if (added > 0) in_batch.push_back(s.get());
  }
  if (batch.n_tokens == 0) return;
  const double t0 = now_s();
  if (const int rc = llama_decode(ctx_, batch); rc != 0) {
    const std::string reason = take_last_llama_error();
    const Status error =
        rc == 1
            ? Status::resource_exhausted("no room left in the KV cache for this batch")
            : Status::internal("llama_decode returned " + std::to_string(rc) + (reason.empty() ? "" : ": " + reason));
    for (Slot* s : in_batch) {
      s->drop_cache(ctx_, speculator_.get());
      s->fail(error);
    }
    return;
  }
  const double submitted = now_s() - t0;
  Speculator* spec = speculator_ && speculator_->process(batch) ? speculator_.get() : nullptr;
  // The verify cost, when the step carried a draft: the decode thread's time in the model's step,
  // its submission and its wait for the devices. llama_decode may return before a GPU is done;
  // the first sample would wait anyway, so waiting here first costs nothing. The draft model's
  // mirror of the batch (process()) runs meanwhile and counts as drafting.
  if (speculator_ && std::any_of(in_batch.begin(), in_batch.end(), [](Slot* s) { return s->checking_draft(); })) {
    const double t1 = now_s();
    llama_synchronize(ctx_);
    speculator_->count_verify_time(submitted + (now_s() - t1));
  }
  int generated = 0;
  for (Slot* s : in_batch) generated += s->after_decode(ctx_, spec);
  record_tokens(generated);
  if (speculator_) {
    std::lock_guard<std::mutex> lock(mutex_);
    speculation_stats_ = speculator_->stats();
  }
}

void Scheduler::record_tokens(int n) {
  if (n == 0) return;
  const double now = now_s();
  std::lock_guard<std::mutex> lock(mutex_);
  tokens_generated_ += static_cast<uint64_t>(n);
  recent_.emplace_back(now, n);
  while (!recent_.empty() && recent_.front().first < now - kRateWindowS) recent_.pop_front();
}

}  // namespace tandem::engine
