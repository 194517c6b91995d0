#include "gateway/openai.h"

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
    if (m[i].contains("content") && !m[i]["content"].is_string() && !m[i]["content"].is_array() && !m[i]["content"].is_null()) {
      return field_error(at + ".content", "must be a string or an array of content parts");
    }
  }
  return Status::ok();
}

Status check_prompt(const json& body) {
  if (!body.contains("prompt")) return field_error("prompt", "is required");
  const json& p = body["prompt"];
  if (p.is_string()) return Status::ok();
  if (p.is_array() && p.size() == 1 && p[0].is_string()) return Status::ok();
  if (p.is_array() && p.size() > 1) return field_error("prompt", "may hold one prompt only (batches are not supported)");
  return field_error("prompt", "must be a string");
}

const char* object_name(Endpoint e, bool chunk) {
  if (e == Endpoint::chat) return chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

}  // namespace

Result<json> parse_request(const std::string& body, Endpoint endpoint, const std::string& model_id) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    return Status::invalid_argument("request body is not valid JSON (at byte " + std::to_string(e.byte) + "): " + e.what());
  } catch (const json::exception& e) {
    // Valid syntax the parser still refuses, e.g. a number out of a double's range ("1e400").
    return Status::invalid_argument(std::string("request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return Status::invalid_argument("request body must be a JSON object");
  if (!j.contains("model") || !j["model"].is_string()) return field_error("model", "is required and must be a string");
  if (j["model"] != model_id) {
    return Status::not_found("model '" + j["model"].get<std::string>() + "' is not served here; this server serves '" + model_id + "'");
  }
  if (j.contains("stream") && !j["stream"].is_boolean() && !j["stream"].is_null()) return field_error("stream", "must be a boolean");
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
    case StatusCode::ok: return 200;
    case StatusCode::invalid_argument: return 400;
    case StatusCode::not_found: return 404;
    case StatusCode::resource_exhausted: return 429;
    case StatusCode::unavailable: return 503;
    case StatusCode::cancelled: return 499;
    case StatusCode::internal: return 500;
  }
  return 500;
}

std::string error_body(const Status& s, const std::string& param) {
  const char* type = "server_error";
  const char* code = nullptr;
  switch (s.code()) {
    case StatusCode::invalid_argument: type = "invalid_request_error"; break;
    case StatusCode::not_found: type = "invalid_request_error"; code = "model_not_found"; break;
    case StatusCode::resource_exhausted: type = "rate_limit_error"; code = "rate_limit_exceeded"; break;
    case StatusCode::unavailable: type = "server_error"; code = "service_unavailable"; break;
    case StatusCode::cancelled: type = "server_error"; code = "cancelled"; break;
    default: break;
  }
  json e = {{"message", s.message()}, {"type", type}, {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code ? json(code) : json(nullptr)}};
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

void Accumulated::add(const GenerationEvent& d) {
  text += d.text;
  reasoning += d.reasoning;
  if (!d.tool_calls.is_array()) return;
  // Tool-call deltas carry an index; names and argument fragments are concatenated per index.
  for (const json& call : d.tool_calls) {
    const size_t index = call.value("index", 0);
    while (tool_calls.size() <= index) {
      tool_calls.push_back({{"id", ""}, {"type", "function"}, {"function", {{"name", ""}, {"arguments", ""}}}});
    }
    json& t = tool_calls[index];
    if (call.contains("id") && call["id"].is_string()) t["id"] = call["id"];
    if (call.contains("function")) {
      const json& f = call["function"];
      if (f.contains("name") && f["name"].is_string()) t["function"]["name"] = t["function"]["name"].get<std::string>() + f["name"].get<std::string>();
      if (f.contains("arguments") && f["arguments"].is_string()) {
        t["function"]["arguments"] = t["function"]["arguments"].get<std::string>() + f["arguments"].get<std::string>();
      }
    }
  }
}

json completion_response(const GenerationRequest& r, const std::string& model_id, int64_t created, const Accumulated& a) {
  json choice = {{"index", 0}, {"finish_reason", a.finish_reason}, {"logprobs", nullptr}};
  if (r.endpoint == Endpoint::chat) {
    json message = {{"role", "assistant"}, {"content", a.text}};
    if (!a.reasoning.empty()) message["reasoning_content"] = a.reasoning;
    if (!a.tool_calls.empty()) message["tool_calls"] = a.tool_calls;
    choice["message"] = message;
  } else {
    choice["text"] = a.text;
  }
  return {{"id", r.id},
          {"object", object_name(r.endpoint, false)},
          {"created", created},
          {"model", model_id},
          {"choices", json::array({choice})},
          {"usage", {{"prompt_tokens", a.prompt_tokens}, {"completion_tokens", a.completion_tokens},
                     {"total_tokens", a.prompt_tokens + a.completion_tokens}}}};
}

json stream_chunk(const GenerationRequest& r, const std::string& model_id, int64_t created, const GenerationEvent& e, bool first) {
  const bool final = e.type == GenerationEvent::Type::done;
  json choice = {{"index", 0}, {"finish_reason", final ? json(e.finish_reason) : json(nullptr)}, {"logprobs", nullptr}};
  if (r.endpoint == Endpoint::chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!e.text.empty()) delta["content"] = e.text;
    if (!e.reasoning.empty()) delta["reasoning_content"] = e.reasoning;
    if (e.tool_calls.is_array() && !e.tool_calls.empty()) delta["tool_calls"] = e.tool_calls;
    choice["delta"] = delta;
  } else {
    choice["text"] = e.text;
  }
  return {{"id", r.id}, {"object", object_name(r.endpoint, true)}, {"created", created}, {"model", model_id},
          {"choices", json::array({choice})}};
}

json usage_chunk(const GenerationRequest& r, const std::string& model_id, int64_t created, uint64_t prompt_tokens,
                 uint64_t completion_tokens) {
  return {{"id", r.id},
          {"object", object_name(r.endpoint, true)},
          {"created", created},
          {"model", model_id},
          {"choices", json::array()},
          {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
                     {"total_tokens", prompt_tokens + completion_tokens}}}};
}

json models_response(const std::string& model_id, int64_t created) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "tandem"}}})}};
}

}  // namespace tandem::gateway::openai
