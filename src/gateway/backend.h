// What the HTTP front end needs from whatever generates tokens: the supervised engine in
// production, a scripted fake in unit tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::gateway {

enum class Endpoint { chat, completion };

struct GenerationRequest {
  std::string id;  // unique per request, e.g. "chatcmpl-3f2a..."
  Endpoint endpoint = Endpoint::chat;
  nlohmann::json body;  // the client's OpenAI request body, already parsed
};

struct GenerationEvent {
  // started: the prompt is tokenized and matched against the cache (prompt_tokens and
  // cached_tokens set), before the first delta; it may be missing (a request that failed first).
  enum class Type { started, delta, done, error };
  Type type = Type::delta;
  std::string text;           // delta: new content text
  std::string reasoning;      // delta: new reasoning text (templates that separate it)
  nlohmann::json tool_calls;  // delta: OpenAI tool_calls delta array, or null
  // delta, done: when the request asked for logprobs, one object per generated token since the
  // last event: {"token": text, "bytes": [..], "logprob": x, "top_logprobs": [{"token", "bytes",
  // "logprob"}, ...]} (OpenAI's chat shape); null otherwise.
  nlohmann::json logprobs;
  std::string finish_reason;   // done: stop, length, tool_calls
  std::string stop_sequence;   // done: the stop string that ended it (finish "stop"), else ""
  uint64_t prompt_tokens = 0;  // started, done
  uint64_t completion_tokens = 0;
  uint64_t cached_tokens = 0;  // started, done: prompt tokens whose KV cache was reused
  Status error;                // error: what went wrong (code maps to the HTTP status)
};

using EventSink = std::function<void(const GenerationEvent&)>;

class Backend {
 public:
  virtual ~Backend() = default;
  // Starts `request`. Events arrive on `sink` from another thread: started, deltas, and exactly one
  // done or error event; after that the sink is never called again. An error Status here means the request
  // was not started and `sink` will never be called.
  virtual Status submit(const GenerationRequest& request, EventSink sink) = 0;
  // Asks to stop request `id` early; its sink then gets a done (finish "stop") or error event soon.
  virtual void cancel(const std::string& id) = 0;

  // The loaded model's tokenizer, answered at once (no slot needed). Errors: unavailable while no
  // model is loaded; invalid_argument for a bad body or token id, naming it.
  struct Token {
    int32_t id = 0;
    std::string piece;  // the token's bytes
  };
  virtual Result<std::vector<Token>> tokenize(const std::string& text, bool add_special) = 0;
  virtual Result<std::string> detokenize(const std::vector<int32_t>& tokens) = 0;
  // The prompt `body` (an OpenAI chat or completion body) renders to, and its number of tokens.
  struct Rendered {
    std::string prompt;  // empty for a completion prompt given as token ids
    int tokens = 0;
  };
  virtual Result<Rendered> render(Endpoint endpoint, const nlohmann::json& body) = 0;
};

}  // namespace tandem::gateway
