// The engine's internal protocol (docs/engine-protocol.md): JSON lines over a Unix socket between
// the gateway (client) and `tandem engine` (server). This header is JSON-free on purpose: the
// gateway uses Debian's nlohmann-json, the engine llama.cpp's vendored copy, and the two never
// exchange JSON objects, only these structs and the encoded lines.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tandem::engine {

inline constexpr int kProtocolVersion = 1;
// A line longer than this is refused (a request body with a long conversation fits easily).
inline constexpr size_t kMaxLineBytes = 64u << 20;

enum class RequestKind { chat, completion };

// Client → engine.
struct EngineRequest {
  enum class Op { submit, cancel, status };
  Op op = Op::status;
  std::string id;            // submit, cancel: the request id, unique among the client's active ones
  RequestKind kind = RequestKind::chat;
  std::string body;          // submit: the OpenAI request body, as serialized JSON (an object)
};

struct ToolCallDelta {
  int index = 0;             // position of the call in the message's tool_calls
  std::string id;            // set on the first delta of a call
  std::string name;          // set on the first delta of a call
  std::string arguments;     // a piece of the JSON arguments text
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;     // prompt tokens whose KV cache was reused from the slot
};

struct LoadProgress {
  double fraction = 0;       // 0..1
  uint64_t bytes = 0;        // weight bytes loaded so far (fraction × total)
  uint64_t total_bytes = 0;
  double rate = 0;           // bytes per second since loading began
};

struct EngineStatus {
  std::string state = "loading";  // "loading", "ready" or "failed"
  LoadProgress load;
  int slots_busy = 0, slots_total = 0;
  int waiting = 0;           // requests queued for a free slot
  double tokens_per_s = 0;   // generated tokens per second over the last few seconds
  std::string error;         // state "failed": why
};

// Engine → client.
struct EngineEvent {
  enum class Type { delta, done, error, status };
  Type type = Type::delta;
  std::string id;            // delta, done, error: the request; empty for a status and for an
                             // error about a line that named no request
  // delta
  std::string text, reasoning;
  std::vector<ToolCallDelta> tool_calls;
  // done
  std::string finish_reason;  // "stop", "length", "tool_calls"
  Usage usage;
  std::vector<int32_t> tokens;  // the generated token ids, only when the body asked "return_tokens"
  // error
  StatusCode code = StatusCode::ok;
  std::string message;
  // status
  EngineStatus status;
};

// Wire names of the error codes: invalid_argument, resource_exhausted, unavailable, cancelled,
// internal (not_found travels as invalid_argument).
const char* wire_code(StatusCode code);

// One line each, without the trailing newline. Invalid UTF-8 in texts is replaced, never thrown.
std::string encode_request(const EngineRequest& request);
std::string encode_event(const EngineEvent& event);

// Parse one line. Errors name what is wrong ("line 1: 'op' must be one of submit, cancel, status").
Result<EngineRequest> decode_request(std::string_view line);
Result<EngineEvent> decode_event(std::string_view line);

}  // namespace tandem::engine
