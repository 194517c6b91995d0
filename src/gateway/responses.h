// The OpenAI Responses API (POST /v1/responses) over the chat path: a Responses body becomes an
// OpenAI chat body, and the generation's events become a Response object, or its stream of
// response.* events with sequence numbers. Pure functions and one Dialect, tested without an
// engine (tests/gateway/responses_test.cpp).
//
// Nothing is stored: `store` is accepted and has no effect, `previous_response_id` is refused
// (400: send the whole conversation as `input`), and no GET /v1/responses/{id} exists.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "gateway/dialect.h"

namespace tandem::gateway::responses {

// Converts a Responses request to an OpenAI chat body:
// - `instructions` → a system message; `input` a string (one user message) or items: messages
//   (role user/assistant/system/developer, anywhere, content a string or input_text/output_text
//   parts, passed on as text parts; developer stays developer, which llama.cpp reads as system),
//   function_call items (→ the assistant's tool_calls, consecutive calls in one message),
//   function_call_output items (→ tool messages); reasoning and other items are left out;
// - tools of type function (flat: name, description, parameters) → function tools; other types
//   (web_search, namespace, file_search, ...) are dropped from the prompt and logged;
//   tool_choice auto/none/required/{type: function, name} (→ OpenAI's named form, every tool kept);
//   parallel_tool_calls;
// - text.format json_schema → response_format json_schema, json_object → json_object;
// - max_output_tokens → max_tokens; temperature, top_p; reasoning.effort → reasoning_effort;
// - store, include, prompt_cache_key, client_metadata, metadata, user, truncation: ignored.
// Errors name the field ("input[3].type: ...").
Result<nlohmann::json> to_openai(const nlohmann::json& body, const std::string& model_id);

class ResponsesDialect : public Dialect {
 public:
  std::string name() const override { return "responses"; }
  std::string id_prefix() const override { return "resp_"; }
  Result<nlohmann::json> parse(const std::string& body, const std::string& model_id) override;
  bool streaming() const override { return stream_; }
  std::string error_body(const Status& error) const override;
  std::string unauthorized_body(const std::string& message) const override;
  nlohmann::json response(const CallInfo& call, const Accumulated& result) override;
  std::string stream_open(const CallInfo& call) override;
  std::string stream_event(const CallInfo& call, const GenerationEvent& event, bool first) override;
  std::string stream_error(const CallInfo& call, const Status& error) override;

 private:
  enum class Item { none, reasoning, message, function_call };
  // The Response object around `output` with `status` (in_progress, completed, incomplete, failed).
  nlohmann::json envelope(const CallInfo& call, const std::string& status, nlohmann::json output) const;
  std::string event(const std::string& type, nlohmann::json fields);
  std::string open_item(Item kind, nlohmann::json item);
  std::string close_item();

  bool stream_ = false;
  nlohmann::json request_;  // the client's body: echoed in the Response (tools, instructions, ...)
  // The stream's place.
  int sequence_ = 0;
  Item item_ = Item::none;
  nlohmann::json current_;                           // the open output item, as it grows
  nlohmann::json output_ = nlohmann::json::array();  // the closed ones
  int tool_index_ = -1;
};

}  // namespace tandem::gateway::responses
