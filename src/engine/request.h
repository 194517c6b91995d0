// The one place where an OpenAI request body is validated and turned into a Job. Every field
// error names the field and the allowed values ("temperature must be a number in [0, 2], got 7").
// Private to the engine.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "engine/job.h"

struct llama_model;

namespace tandem::engine {

// What validation needs to know about the loaded model. Pointers are borrowed and must outlive
// the calls; everything here is read-only, so prepare_job may run on any thread.
struct ModelFacts {
  const llama_model* model = nullptr;
  const ChatTemplates* chat = nullptr;
  int n_ctx_slot = 0;  // tokens of context per request
};

// Parses and validates `body` (an OpenAI chat or completion request), renders and tokenizes the
// prompt, and builds the sampler. Errors are invalid_argument with the field's name, the prompt
// length against the context, or why a grammar or schema does not parse.
Result<std::unique_ptr<Job>> prepare_job(RequestKind kind, const nlohmann::json& body, const ModelFacts& facts);

// The prompt `body` renders to, exactly as prepare_job would render and tokenize it (the chat
// template with tools and the generation prompt), without checking it against the context: its
// text (empty for a prompt given as token ids) and its number of tokens. Errors as prepare_job's.
struct RenderedPrompt {
  std::string text;
  int tokens = 0;
};
Result<RenderedPrompt> render_prompt_only(RequestKind kind, const nlohmann::json& body, const ModelFacts& facts);

}  // namespace tandem::engine
