// The OpenAI wire format: request checks done at the door, response and stream-chunk shapes, and
// the error object. Pure functions, so they are tested without a server.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "gateway/backend.h"
#include "gateway/dialect.h"

namespace tandem::gateway::openai {

// Parses a request body. Invalid JSON is reported with its byte position; a body that is not an
// object, a wrong `model`, `stream`/`n`/`messages`/`prompt` of the wrong shape are reported naming
// the field. Without `model` the request goes to the one model served. A completion's `prompt` is
// a string or token ids (an array of integers, or one such array). Unknown fields are kept (the
// engine ignores what it does not use).
Result<nlohmann::json> parse_request(const std::string& body, Endpoint endpoint, const std::string& model_id);

// {"error": {"message", "type", "param", "code"}} for a Status, and the HTTP status it maps to.
// A prompt longer than the context (engine/protocol.h kPromptTooLong) gets the code
// `context_length_exceeded` and, unless `param` is given, the param `messages`/`prompt`.
int http_status(const Status& status);
std::string error_body(const Status& status, const std::string& param = "", Endpoint endpoint = Endpoint::chat);
// True for the engine's "the prompt does not fit the context" error.
bool is_context_exceeded(const Status& status);

// The complete (non-streaming) response for a finished request.
nlohmann::json completion_response(const CallInfo& call, Endpoint endpoint, const Accumulated& result);

// The /v1/models listing, and one model's object (GET /v1/models/{id}).
nlohmann::json model_object(const std::string& model_id, int64_t created);
nlohmann::json models_response(const std::string& model_id, int64_t created);

// /v1/chat/completions and /v1/completions.
class OpenAiDialect : public Dialect {
 public:
  explicit OpenAiDialect(Endpoint endpoint) : endpoint_(endpoint) {}
  std::string name() const override { return endpoint_ == Endpoint::chat ? "chat" : "completions"; }
  Endpoint endpoint() const override { return endpoint_; }
  std::string id_prefix() const override { return endpoint_ == Endpoint::chat ? "chatcmpl-" : "cmpl-"; }
  Result<nlohmann::json> parse(const std::string& body, const std::string& model_id) override;
  bool streaming() const override { return stream_; }
  std::string error_body(const Status& error) const override { return openai::error_body(error, "", endpoint_); }
  std::string unauthorized_body(const std::string& message) const override;
  nlohmann::json response(const CallInfo& call, const Accumulated& result) override;
  std::string stream_event(const CallInfo& call, const GenerationEvent& event, bool first) override;
  std::string stream_error(const CallInfo& call, const Status& error) override;

 private:
  const Endpoint endpoint_;
  bool stream_ = false;
  bool include_usage_ = false;
  size_t text_offset_ = 0;  // completions' logprobs: bytes of text streamed so far
};

}  // namespace tandem::gateway::openai
