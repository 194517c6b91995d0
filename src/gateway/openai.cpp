#include "gateway/openai.h"

#include "engine/protocol.h"

namespace tandem::gateway::openai {
namespace {

using nlohmann::json;

Status field_error(const std::string& field, const std::string& what) {
  return Status::invalid_argument("'" + field + "' " + what);
}

Status check_messages(const json& body) {
  if (!body.contains("messages")) return field_error("messages", "is required");
  const json& m = body["messages"];
  if (!m.is_array() || m.empty()) return field_error("messages", "must be a non-empty array");
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m[i].is_object()) return field_error(at, "must be an object");
    if (!m[i].contains("role") || !m[i]["role"].is_string()) return field_error(at + ".role", "must be a string");
    const std::string role = m[i]["role"];
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool") {
      return field_error(at + ".role", "must be one of system, developer, user, assistant, tool; got '" + role + "'");
    }
    if (m[i].contains("content") && !m[i]["content"].is_string() && !m[i]["content"].is_array() &&
        !m[i]["content"].is_null()) {
      return field_error(at + ".content", "must be a string or an array of content parts");
    }
  }
  return Status::ok();
}

Status check_prompt(const json& body) {
  if (!body.contains("prompt")) return field_error("prompt", "is required");
  const json& p = body["prompt"];
  auto ints = [](const json& a) {
    if (!a.is_array() || a.empty()) return false;
    for (const json& t : a)
      if (!t.is_number_integer()) return false;
    return true;
  };
  if (p.is_string() || ints(p)) return Status::ok();
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || ints(p[0]))) return Status::ok();
  if (p.is_array() && p.size() > 1 && (p[0].is_string() || p[0].is_array())) {
    return field_error("prompt", "may hold one prompt only (batches are not supported)");
  }
  return field_error("prompt", "must be a string or an array of token ids (integers)");
}

const char* object_name(Endpoint e, bool chunk) {
  if (e == Endpoint::chat) return chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

}  // namespace

Result<json> parse_request(const std::string& body, Endpoint endpoint, const std::string& model_id) {
  auto parsed = parse_json_object(body);
  if (!parsed.is_ok()) return parsed.status();
  json j = std::move(parsed.value());
  // One model is served: a request that names none gets it.
  if (!j.contains("model") || j["model"].is_null()) j["model"] = model_id;
  if (!j["model"].is_string()) return field_error("model", "must be a string");
  if (j["model"] != model_id) {
    return Status::not_found("model '" + j["model"].get<std::string>() + "' is not served here; this server serves '" +
                             model_id + "'");
  }
  if (j.contains("stream") && !j["stream"].is_boolean() && !j["stream"].is_null())
    return field_error("stream", "must be a boolean");
  if (j.contains("n") && !j["n"].is_null() && (!j["n"].is_number_integer() || j["n"] != 1)) {
    return field_error("n", "must be 1 (one choice per request)");
  }
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    if (!j["stream_options"].is_object()) return field_error("stream_options", "must be an object");
    const json& so = j["stream_options"];
    if (so.contains("include_usage") && !so["include_usage"].is_boolean() && !so["include_usage"].is_null()) {
      return field_error("stream_options.include_usage", "must be a boolean");
    }
  }
  TANDEM_RETURN_IF_ERROR(endpoint == Endpoint::chat ? check_messages(j) : check_prompt(j));
  return j;
}

int http_status(const Status& s) {
  switch (s.code()) {
    case StatusCode::ok:
      return 200;
    case StatusCode::invalid_argument:
      return 400;
    case StatusCode::not_found:
      return 404;
    case StatusCode::resource_exhausted:
      return 429;
    case StatusCode::unavailable:
      return 503;
    case StatusCode::cancelled:
      return 499;
    case StatusCode::internal:
      return 500;
  }
  return 500;
}

bool is_context_exceeded(const Status& s) {
  return s.code() == StatusCode::invalid_argument && s.message().rfind(engine::kPromptTooLong, 0) == 0;
}

std::string error_body(const Status& s, const std::string& param, Endpoint endpoint) {
  const char* type = "server_error";
  const char* code = nullptr;
  std::string where = param;
  switch (s.code()) {
    case StatusCode::invalid_argument:
      type = "invalid_request_error";
      if (is_context_exceeded(s)) {
        code = "context_length_exceeded";
        if (where.empty()) where = endpoint == Endpoint::chat ? "messages" : "prompt";
      } else if (where.empty() && s.message().rfind("'", 0) == 0) {
        // The gateway's own field errors begin with the field: "'messages[0].role' must be ...".
        where = s.message().substr(1, s.message().find('\'', 1) - 1);
      }
      break;
    case StatusCode::not_found:
      type = "invalid_request_error";
      code = "model_not_found";
      break;
    case StatusCode::resource_exhausted:
      type = "rate_limit_error";
      code = "rate_limit_exceeded";
      break;
    case StatusCode::unavailable:
      type = "server_error";
      code = "service_unavailable";
      break;
    case StatusCode::cancelled:
      type = "server_error";
      code = "cancelled";
      break;
    default:
      break;
  }
  json e = {{"message", s.message()},
            {"type", type},
            {"param", where.empty() ? json(nullptr) : json(where)},
            {"code", code ? json(code) : json(nullptr)}};
  return dump_json(json{{"error", e}});
}

namespace {

// Completions' legacy logprobs shape from the chat shape's entries; offsets count from `offset`.
json completion_logprobs(const json& entries, size_t offset) {
  json out = {{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (const json& e : entries) {
    const std::string token = e.value("token", "");
    out["tokens"].push_back(token);
    out["token_logprobs"].push_back(e["logprob"]);
    json top = json::object();
    for (const json& t : e.value("top_logprobs", json::array())) top[t.value("token", "")] = t["logprob"];
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(offset);
    offset += token.size();
  }
  return out;
}

json chat_logprobs(const json& entries) { return {{"content", entries}, {"refusal", nullptr}}; }

bool wants_logprobs(const json& body) {
  const json lp = body.value("logprobs", json());
  return (lp.is_boolean() && lp.get<bool>()) || lp.is_number_integer();
}

// `cached`: prompt tokens whose KV was reused (a slot's prefix or the prompt cache), as OpenAI
// reports the prompt tokens its cache served.
json usage_json(uint64_t prompt, uint64_t completion, uint64_t cached) {
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

}  // namespace

json completion_response(const CallInfo& call, Endpoint endpoint, const Accumulated& a) {
  json choice = {{"index", 0}, {"finish_reason", a.finish_reason}, {"logprobs", nullptr}};
  const bool logprobs = wants_logprobs(call.body);
  if (endpoint == Endpoint::chat) {
    json message = {{"role", "assistant"}, {"content", a.text}};
    if (!a.reasoning.empty()) message["reasoning_content"] = a.reasoning;
    if (!a.tool_calls.empty()) message["tool_calls"] = a.tool_calls;
    choice["message"] = message;
    if (logprobs) choice["logprobs"] = chat_logprobs(a.logprobs);
  } else {
    choice["text"] = a.text;
    if (logprobs) choice["logprobs"] = completion_logprobs(a.logprobs, 0);
  }
  return {{"id", call.id},
          {"object", object_name(endpoint, false)},
          {"created", call.created},
          {"model", call.model_id},
          {"choices", json::array({choice})},
          {"usage", usage_json(a.prompt_tokens, a.completion_tokens, a.cached_tokens)}};
}

json model_object(const std::string& model_id, int64_t created) {
  // `default`: a request without `model` is served by this one.
  return {{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "tandem"}, {"default", true}};
}

json models_response(const std::string& model_id, int64_t created) {
  return {{"object", "list"}, {"data", json::array({model_object(model_id, created)})}};
}

Result<json> OpenAiDialect::parse(const std::string& body, const std::string& model_id) {
  auto j = parse_request(body, endpoint_, model_id);
  if (!j.is_ok()) return j;
  stream_ = j->value("stream", json(false)).is_boolean() && j->value("stream", false);
  const json so = j->value("stream_options", json());
  include_usage_ =
      so.is_object() && so.value("include_usage", json(false)).is_boolean() && so.value("include_usage", false);
  return j;
}

std::string OpenAiDialect::unauthorized_body(const std::string& message) const {
  json e = {{"message", message}, {"type", "authentication_error"}, {"param", nullptr}, {"code", "invalid_api_key"}};
  return dump_json(json{{"error", e}});
}

json OpenAiDialect::response(const CallInfo& call, const Accumulated& result) {
  return completion_response(call, endpoint_, result);
}

std::string OpenAiDialect::stream_event(const CallInfo& call, const GenerationEvent& e, bool first) {
  const bool final = e.type == GenerationEvent::Type::done;
  json choice = {{"index", 0}, {"finish_reason", final ? json(e.finish_reason) : json(nullptr)}, {"logprobs", nullptr}};
  const bool logprobs = e.logprobs.is_array() && !e.logprobs.empty();
  if (endpoint_ == Endpoint::chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!e.text.empty()) delta["content"] = e.text;
    if (!e.reasoning.empty()) delta["reasoning_content"] = e.reasoning;
    if (e.tool_calls.is_array() && !e.tool_calls.empty()) delta["tool_calls"] = e.tool_calls;
    choice["delta"] = delta;
    if (logprobs) choice["logprobs"] = chat_logprobs(e.logprobs);
  } else {
    choice["text"] = e.text;
    if (logprobs) {
      choice["logprobs"] = completion_logprobs(e.logprobs, text_offset_);
      for (const json& t : e.logprobs) text_offset_ += t.value("token", "").size();
    }
  }
  json chunk = {{"id", call.id},
                {"object", object_name(endpoint_, true)},
                {"created", call.created},
                {"model", call.model_id},
                {"choices", json::array({choice})}};
  std::string out = sse_data(chunk);
  if (final) {
    if (include_usage_) {
      out += sse_data({{"id", call.id},
                       {"object", object_name(endpoint_, true)},
                       {"created", call.created},
                       {"model", call.model_id},
                       {"choices", json::array()},
                       {"usage", usage_json(e.prompt_tokens, e.completion_tokens, e.cached_tokens)}});
    }
    out += "data: [DONE]\n\n";
  }
  return out;
}

std::string OpenAiDialect::stream_error(const CallInfo&, const Status& error) {
  return "data: " + error_body(error) + "\n\n";
}

}  // namespace tandem::gateway::openai
