// The OpenAI wire format: request checks done at the door, response and stream-chunk shapes, and
// the error object. Pure functions, so they are tested without a server.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "gateway/backend.h"

namespace tandem::gateway::openai {

// Parses a request body. Invalid JSON is reported with its byte position; a body that is not an
// object, a wrong `model`, `stream`/`n`/`messages`/`prompt` of the wrong shape are reported naming
// the field. Unknown fields are kept (the engine ignores what it does not use).
Result<nlohmann::json> parse_request(const std::string& body, Endpoint endpoint, const std::string& model_id);

// {"error": {"message", "type", "param", "code"}} for a Status, and the HTTP status it maps to.
int http_status(const Status& status);
std::string error_body(const Status& status, const std::string& param = "");

// The complete (non-streaming) response for a finished request.
struct Accumulated {
  std::string text, reasoning;
  nlohmann::json tool_calls = nlohmann::json::array();
  std::string finish_reason = "stop";
  uint64_t prompt_tokens = 0, completion_tokens = 0;
  void add(const GenerationEvent& delta);  // merges a delta, including partial tool-call deltas
};
nlohmann::json completion_response(const GenerationRequest& request, const std::string& model_id, int64_t created,
                                   const Accumulated& result);

// One streaming chunk for a delta or the final event (finish_reason set), and the usage chunk.
nlohmann::json stream_chunk(const GenerationRequest& request, const std::string& model_id, int64_t created,
                            const GenerationEvent& event, bool first);
nlohmann::json usage_chunk(const GenerationRequest& request, const std::string& model_id, int64_t created,
                           uint64_t prompt_tokens, uint64_t completion_tokens);

// The /v1/models listing.
nlohmann::json models_response(const std::string& model_id, int64_t created);

}  // namespace tandem::gateway::openai
