// The Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens) over the OpenAI chat
// path: a Messages body becomes an OpenAI chat body, and the generation's events become a
// Message, or its stream of message_start / content_block_* / message_delta / message_stop events.
// Pure functions and one Dialect, tested without an engine (tests/gateway/anthropic_test.cpp).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "gateway/dialect.h"

namespace tandem::gateway::anthropic {

// Converts a Messages request to an OpenAI chat body, rendering as llama-server's conversion does:
// - `system` (a string or text blocks, joined as they are; cache_control ignored; the cch stamp of
//   Claude Code's billing line evened out) → a system message;
// - system turns inside `messages` → system messages where they stand (never moved to the front);
// - user turns: text blocks → text parts; tool_result blocks → role "tool" messages (before the
//   turn's text, as OpenAI wants them right after the assistant's tool calls);
// - assistant turns: text → content, tool_use → tool_calls, thinking → reasoning_content
//   (redacted_thinking dropped);
// - tools (name, description, input_schema) → function tools; server tools (web_search, bash,
//   ...) tandem cannot run are dropped and logged; tool_choice auto/any/tool/none → auto /
//   required / {type: function, function: {name}} (every tool stays in the prompt) / none;
//   disable_parallel_tool_use;
// - stop_sequences → stop; max_tokens, temperature, top_p, top_k as they are (the engine clamps
//   max_tokens to what the context holds: a larger one is never refused);
// - thinking {type: disabled} turns the template's thinking off; enabled/adaptive keep it on;
// - metadata, context_management, output_config, service_tier and unknown fields: ignored.
// A missing `model` is the served one; another model is not_found. Errors name the field
// ("messages[2].content[0].type: 'image' blocks are not supported").
Result<nlohmann::json> to_openai(const nlohmann::json& body, const std::string& model_id);

// {"type": "error", "error": {"type", "message"}} and its HTTP status: invalid_request_error
// 400, authentication_error 401, not_found_error 404, rate_limit_error 429, api_error 500 and
// overloaded_error 529 (Anthropic's own status for it, which its clients retry) for every
// `unavailable` (loading, degraded, busy, draining).
nlohmann::json error_object(const std::string& type, const std::string& message);
int http_status(const Status& error);
std::string error_type(const Status& error);

// The stop_reason of a finished generation: end_turn, max_tokens, stop_sequence (only for one of
// the request's stop_sequences; `stop_sequence` then names it) or tool_use.
std::string stop_reason(const GenerationEvent& done, const nlohmann::json& openai_body, std::string* stop_sequence);

class MessagesDialect : public Dialect {
 public:
  std::string name() const override { return "messages"; }
  std::string id_prefix() const override { return "msg_"; }
  Result<nlohmann::json> parse(const std::string& body, const std::string& model_id) override;
  bool streaming() const override { return stream_; }
  int http_status(const Status& error) const override { return anthropic::http_status(error); }
  std::string error_body(const Status& error) const override;
  std::string unauthorized_body(const std::string& message) const override;
  nlohmann::json response(const CallInfo& call, const Accumulated& result) override;
  std::string stream_started(const CallInfo& call, const Accumulated& so_far) override;
  std::string stream_event(const CallInfo& call, const GenerationEvent& event, bool first) override;
  std::string stream_error(const CallInfo& call, const Status& error) override;
  std::string stream_ping() const override;

 private:
  enum class Block { none, thinking, text, tool_use };
  // message_start, with the prompt's usage, once per stream; "" after that.
  std::string message_start(const CallInfo& call, uint64_t prompt, uint64_t cached);
  std::string open_block(Block kind, const nlohmann::json& start);
  std::string close_block();

  bool stream_ = false;
  bool started_ = false;  // message_start was sent
  // The stream's place: the open content block, its index, the tool call it belongs to.
  Block block_ = Block::none;
  int index_ = -1;
  int tool_index_ = -1;
};

}  // namespace tandem::gateway::anthropic
