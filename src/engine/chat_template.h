// Chat through llama.cpp's common library: the model's own (jinja) template renders the messages,
// tools and response format exactly as llama-server's /v1/chat/completions does, and the matching
// parser splits the generated text into content, reasoning and tool calls. Private to the engine.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat.h"  // llama.cpp common
#include "common/status.h"
#include "engine/protocol.h"

struct llama_model;

namespace tandem::engine {

struct ChatPrompt {
  std::string prompt;                // the rendered conversation, ready to tokenize
  common_chat_params params;         // grammar, triggers, preserved tokens, extra stops
  common_chat_parser_params parser;  // how to read the output back
  bool call_required = false;        // tool_choice required or a named tool: the answer must be a call
};

// The JSON schema that `response_format` (json_object, json_schema) or `json_schema` asks for,
// and its grammar; both empty when none is asked for. Errors say what is wrong with the schema.
struct SchemaGrammar {
  nlohmann::json schema;
  std::string grammar;
};
Result<SchemaGrammar> response_schema(const nlohmann::json& body);

// The model's chat templates. Immutable after load; render() may be called from any thread.
class ChatTemplates {
 public:
  // Reads the template from the model's metadata (falls back to llama.cpp's default, chatml).
  static Result<ChatTemplates> load(const llama_model* model);

  // Renders an OpenAI chat body (messages, tools, tool_choice, parallel_tool_calls,
  // response_format, json_schema, grammar, chat_template_kwargs, reasoning_format,
  // reasoning_effort, add_generation_prompt). Errors name the offending field.
  Result<ChatPrompt> render(const nlohmann::json& body) const;

 private:
  std::shared_ptr<common_chat_templates> templates_;
};

// Turns the growing output text of one chat request into deltas. Not thread-safe; one per request.
class ChatStream {
 public:
  explicit ChatStream(common_chat_parser_params parser);

  // Parses `text` (everything generated so far, stop strings removed) and adds to `delta` what
  // changed since the last call. `partial` is false for the final call.
  void update(const std::string& text, bool partial, EngineEvent* delta);

  bool has_tool_calls() const { return !message_.tool_calls.empty(); }

 private:
  common_chat_parser_params parser_;
  common_chat_msg message_;
  std::vector<std::string> tool_call_ids_;
};

}  // namespace tandem::engine
