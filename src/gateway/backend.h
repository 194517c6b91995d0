// What the HTTP front end needs from whatever generates tokens: the supervised engine in
// production, a scripted fake in unit tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::gateway {

enum class Endpoint { chat, completion };

struct GenerationRequest {
  std::string id;        // unique per request, e.g. "chatcmpl-3f2a..."
  Endpoint endpoint = Endpoint::chat;
  nlohmann::json body;   // the client's OpenAI request body, already parsed
};

struct GenerationEvent {
  enum class Type { delta, done, error };
  Type type = Type::delta;
  std::string text;            // delta: new content text
  std::string reasoning;       // delta: new reasoning text (templates that separate it)
  nlohmann::json tool_calls;   // delta: OpenAI tool_calls delta array, or null
  std::string finish_reason;   // done: stop, length, tool_calls
  uint64_t prompt_tokens = 0;  // done
  uint64_t completion_tokens = 0;
  Status error;                // error: what went wrong (code maps to the HTTP status)
};

using EventSink = std::function<void(const GenerationEvent&)>;

class Backend {
 public:
  virtual ~Backend() = default;
  // Starts `request`. Events arrive on `sink` from another thread, ending with exactly one done or
  // error event; after that the sink is never called again. An error Status here means the request
  // was not started and `sink` will never be called.
  virtual Status submit(const GenerationRequest& request, EventSink sink) = 0;
  // Asks to stop request `id` early; its sink then gets a done (finish "stop") or error event soon.
  virtual void cancel(const std::string& id) = 0;
};

}  // namespace tandem::gateway
