// One validated request, ready for a slot: prompt tokens, sampler, stop strings, limits and where
// its events go. Built by prepare_job() (request.h) on the submitting thread, then owned by the
// scheduler and touched only by its decode thread. Private to the engine.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/protocol.h"
#include "sampling.h"  // llama.cpp common

namespace tandem::engine {

// Receives a request's events on the scheduler's decode thread: started, deltas, then exactly one
// done or error. Must return quickly (queue the event, do no I/O that can block).
using EventCallback = std::function<void(const EngineEvent&)>;

struct Job {
  std::string id;
  std::vector<llama_token> prompt;
  common_sampler_ptr sampler;
  std::vector<std::string> stops;
  int max_tokens = 0;  // > 0; also bounded by the slot's context
  bool ignore_eos = false;
  bool return_tokens = false;           // report the generated token ids in the done event
  int draft_max = -1;                   // "speculative.n_max": this request's drafts at most; -1: the engine's
  int n_probs = -1;                     // -1: no logprobs; else report each token's logprob and this many alternatives
  std::set<llama_token> shown_special;  // special tokens rendered as text (the chat format's markers)
  std::optional<ChatStream> chat;       // chat requests: reads content, reasoning and tool calls back
  // The first tokens to generate, whatever the model would sample: the chat format's tool-call
  // opener when a call is required (its grammar would allow any text before the call).
  std::vector<llama_token> forced;
  EventCallback on_event;
};

}  // namespace tandem::engine
