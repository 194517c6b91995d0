// One HTTP API's shape of a generation (OpenAI chat and completions, Anthropic Messages, OpenAI
// Responses): how its request body becomes the OpenAI body the backend takes, and how the
// backend's events become its response, its stream and its errors. The front end (api_server.cpp)
// does the rest alike for all of them: keys, limits, admission, cancellation, metrics.
//
// One Dialect object per request: a streaming dialect keeps its place in the stream (open
// content blocks, sequence numbers). Methods are called from the request's own thread, one at a
// time; no locking is needed.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "gateway/backend.h"

namespace tandem::gateway {

// What every dialect knows about its request.
struct CallInfo {
  std::string id;        // the response id: "chatcmpl-…", "msg_…", "resp_…"
  std::string model_id;  // the served model's name
  int64_t created = 0;   // unix seconds
  nlohmann::json body;   // the OpenAI body sent to the backend
};

// A request's merged events so far: the prompt's usage from its started event, the deltas, and
// from its done event the finish and the whole usage.
struct Accumulated {
  std::string text, reasoning;
  nlohmann::json tool_calls = nlohmann::json::array();  // OpenAI's message.tool_calls
  nlohmann::json logprobs = nlohmann::json::array();    // GenerationEvent::logprobs, concatenated
  std::string finish_reason = "stop";
  std::string stop_sequence;
  uint64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  // Merges an event: started sets the prompt's usage; deltas, partial tool-call deltas included;
  // done sets the finish and usage.
  void add(const GenerationEvent& event);
};

class Dialect {
 public:
  virtual ~Dialect() = default;

  // The name metrics and the access log use ("chat", "messages", ...).
  virtual std::string name() const = 0;
  virtual Endpoint endpoint() const { return Endpoint::chat; }
  // Prefix of the response id ("chatcmpl-", "msg_", "resp_").
  virtual std::string id_prefix() const = 0;
  // Parses the client's body and converts it to the OpenAI body. Errors name the client's field.
  virtual Result<nlohmann::json> parse(const std::string& body, const std::string& model_id) = 0;
  // Whether the client asked for a stream (read after parse()).
  virtual bool streaming() const = 0;

  // An error as this API shapes it, and its HTTP status.
  virtual int http_status(const Status& error) const;
  virtual std::string error_body(const Status& error) const = 0;
  // The 401 body for a missing or wrong key.
  virtual std::string unauthorized_body(const std::string& message) const = 0;

  // The whole response of a finished request.
  virtual nlohmann::json response(const CallInfo& call, const Accumulated& result) = 0;
  // Server-sent-event text: what a stream opens with, what one event adds (`first`: the stream's
  // first event), an error that ends the stream, and the keep-alive sent while nothing happens.
  virtual std::string stream_open(const CallInfo&) { return ""; }
  // What the stream says once the prompt's usage is known (`so_far`'s prompt and cached tokens),
  // before the first generated token.
  virtual std::string stream_started(const CallInfo&, const Accumulated& /*so_far*/) { return ""; }
  virtual std::string stream_event(const CallInfo& call, const GenerationEvent& event, bool first) = 0;
  virtual std::string stream_error(const CallInfo& call, const Status& error) = 0;
  virtual std::string stream_ping() const { return ": ping\n\n"; }
};

// "data: {json}\n\n", and with an event name, "event: NAME\ndata: {json}\n\n".
std::string sse_data(const nlohmann::json& j);
std::string sse_event(const std::string& name, const nlohmann::json& j);
// JSON text; invalid UTF-8 is replaced, never thrown.
std::string dump_json(const nlohmann::json& j);

// Logs, once per process and at debug level, that `api` accepted and ignored `field` (a beta or
// unknown field a client sends): clients are not refused for them, and the log stays quiet.
void note_ignored(const std::string& api, const std::string& field);

// Logs, once per process and at info level, that a tool a client offers (a server tool such as
// web_search, a namespace of sub-agent tools) cannot run here and is left out of the prompt.
void note_tool_left_out(const std::string& api, const std::string& tool, const std::string& type);

// The request conversions' field checks. field_error: "FIELD: WHAT" as invalid_argument.
// string_field / bool_field: o[key] into *out when it has the type, *out unchanged when it is
// absent or null; another type is an error naming `where`.key (`where` "" for the body itself),
// never nlohmann's exception.
Status field_error(const std::string& field, const std::string& what);
Status string_field(const nlohmann::json& o, const char* key, const std::string& where, std::string* out);
Status bool_field(const nlohmann::json& o, const char* key, const std::string& where, bool* out);

// Parses a request body: invalid JSON is reported with its byte position, a non-object named.
Result<nlohmann::json> parse_json_object(const std::string& body);

}  // namespace tandem::gateway
