// The continuous-batching scheduler: N parallel slots over one llama_context, one decode thread.
//
// Every llama_decode call carries the next token of each generating request together with prompt
// chunks of requests still reading their prompt, so prompt processing and generation of
// different requests share batches. Each slot owns one KV stream (kv_unified = false, which
// MiniMax-M3's sparse attention needs with several sequences); a new request goes to the free
// slot whose stream shares the longest prefix with its prompt, and only the rest is evaluated.
//
// Thread-safety: submit(), cancel() and stats() may be called from any thread. Event callbacks
// run on the decode thread, never under the scheduler's lock, so they may call cancel() or
// submit(); they must not block.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "engine/chat_template.h"
#include "engine/job.h"
#include "engine/prompt_cache.h"
#include "engine/protocol.h"
#include "engine/request.h"
#include "engine/speculation.h"

struct llama_context;
struct llama_model;

namespace tandem::engine {

class Slot;

struct SchedulerOptions {
  int parallel = 1;    // slots: requests decoded at the same time
  int context = 4096;  // tokens of context per slot (the KV cache holds context × parallel)
  int batch = 512;     // tokens per llama_decode call at most
  int threads = 0;     // CPU threads; 0: all cores
  // The KV cache's type, of keys and values alike ([model] kv_type: the plan counts the cache in
  // it), and of a draft model's cache too.
  std::string kv_type = "f16";
  // Prompt tokens of one slot per decode at most; 0: as many as the batch holds. See
  // docs/engine-protocol.md (exactness) for why a value below 64 makes results independent of
  // what else shares the batch on the CPU backend.
  int max_prompt_chunk = 0;
  // Memory for the prompt cache (engine/prompt_cache.h) on each node: the states of sequences that
  // left their slot idle or were taken over, restored when a later request shares a longer prefix
  // with one than with any slot. 0 turns it off. A tandem worker keeps its part of each state in
  // its own memory when Scheduler::create is given the workers' StateShares
  // (engine/worker_shares.h); otherwise a save or restore carries that part over the link.
  uint64_t prompt_cache_bytes = 0;
  // A folder for the states memory no longer holds, bounded on each node ("" = none: they are
  // dropped); each tandem worker spills its part into its own spill folder.
  std::string prompt_cache_dir;
  uint64_t prompt_cache_dir_bytes = 0;
  // Speculative decoding (engine/speculation.h); mode "off" by default.
  SpeculationOptions speculation;
  // Before the first request: one prompt step and one decode step of a throwaway sequence, then
  // the KV cache cleared, so that the first request does not pay the devices' start-up (CUDA
  // loading its kernels, a worker's first graph).
  bool warm_up = true;
};

struct SchedulerStats {
  int busy = 0, total = 0, waiting = 0;
  double tokens_per_s = 0;        // generated tokens per second over the last few seconds
  uint64_t tokens_generated = 0;  // since start
  PromptCacheStats prompt_cache;
  std::string speculative = "off";  // the mode
  SpeculationStats speculation;
};

class Scheduler {
 public:
  // Creates the context on `model` (borrowed: it must outlive the scheduler) with flash
  // attention and per-sequence KV streams, warms it up (SchedulerOptions::warm_up), and starts the
  // decode thread. Fails with resource_exhausted, naming what was attempted, when the context does
  // not fit, and with the reason when the warm-up's decode fails (a worker lost, say). The prompt
  // cache saves and restores its states through `shares` (borrowed: it must outlive the scheduler;
  // null: every state whole in this process's memory, engine/prompt_cache.h).
  static Result<std::unique_ptr<Scheduler>> create(llama_model* model, const SchedulerOptions& options,
                                                   StateShares* shares = nullptr);
  ~Scheduler();  // stops the thread; requests still running or waiting get an unavailable error

  // Validates `body` (an OpenAI chat or completion request, serialized JSON) and queues it.
  // On error nothing is queued and `on_event` is never called. Otherwise `on_event` receives its
  // deltas and then exactly one done or error event. `id` must not be in use.
  Status submit(const std::string& id, RequestKind kind, const std::string& body, EventCallback on_event);

  // Ends request `id` (queued or running) with a cancelled error and frees its slot before the
  // next decode step. Unknown or finished ids are ignored.
  void cancel(const std::string& id);

  // The model's tokenizer, for the tokenize / detokenize / count ops. Read-only on the model:
  // callable from any thread while decoding goes on.
  // `text` as token ids (and each one's piece); add_special adds BOS/EOS as a prompt gets them.
  std::vector<int32_t> tokenize(const std::string& text, bool add_special, bool parse_special) const;
  std::string token_piece(int32_t token) const;
  // The text of `tokens`; an id outside the vocabulary is an invalid_argument error naming it.
  Result<std::string> detokenize(const std::vector<int32_t>& tokens) const;
  // The prompt `body` renders to and its number of tokens, as submit() would evaluate them.
  Result<RenderedPrompt> render_prompt(RequestKind kind, const std::string& body) const;

  SchedulerStats stats() const;
  int context_per_request() const { return options_.context; }

 private:
  Scheduler(llama_model* model, llama_context* ctx, const SchedulerOptions& options, ChatTemplates chat,
            std::unique_ptr<PromptCache> prompt_cache, std::unique_ptr<Speculator> speculator);
  // Asks the speculator for each generating slot's draft of the next step.
  void draft();
  void run();
  bool wait_for_work();
  void take_cancellations();
  void assign_waiting();
  // Before `slot` takes a request for `prompt`: saves what the slot holds when the request would
  // cut it, and restores the cached state sharing a longer prefix than the slot's `held_prefix`.
  void use_prompt_cache(Slot& slot, size_t held_prefix, const std::vector<int32_t>& prompt);
  // Puts what `slot` holds into the prompt cache (64 tokens or more).
  void save_slot(Slot& slot);
  // Saves every free slot that holds what the cache does not (when nothing runs or waits).
  void save_idle_slots();
  bool idle() const;
  void step();
  void record_tokens(int n);

  // Constant after construction.
  llama_model* const model_;
  llama_context* const ctx_;
  const SchedulerOptions options_;
  const ChatTemplates chat_;

  // Owned by the decode thread.
  std::vector<std::unique_ptr<Slot>> slots_;
  std::unique_ptr<PromptCache> prompt_cache_;  // its stats copied into prompt_cache_stats_ under mutex_
  std::unique_ptr<Speculator> speculator_;     // null: off; its stats copied into speculation_stats_
  uint64_t next_state_key_ = 1;
  struct BatchDeleter {
    void operator()(struct llama_batch* b) const;
  };
  std::unique_ptr<struct llama_batch, BatchDeleter> batch_;

  // Guarded by mutex_.
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Job>> waiting_;
  std::vector<std::string> cancels_;
  std::vector<std::string> active_ids_;  // queued or running: duplicates are refused
  bool stopping_ = false;
  int busy_ = 0;
  std::deque<std::pair<double, int>> recent_;  // (time in s, tokens generated by one step)
  uint64_t tokens_generated_ = 0;
  PromptCacheStats prompt_cache_stats_;
  SpeculationStats speculation_stats_;

  std::thread thread_;  // last: started when everything above exists
};

}  // namespace tandem::engine
