#include "gateway/anthropic.h"

#include <set>

#include "common/log.h"
#include "gateway/openai.h"

namespace tandem::gateway::anthropic {
namespace {

using nlohmann::json;

Status field_error(const std::string& field, const std::string& what) {
  return Status::invalid_argument(field + ": " + what);
}

// The fields a Messages request may carry that mean nothing here; read without a word.
const std::set<std::string> kKnown = {"model",          "messages",    "system",  "max_tokens", "stream",
                                      "stop_sequences", "temperature", "top_p",   "top_k",      "tools",
                                      "tool_choice",    "thinking",    "metadata"};

// Text of a string or of text blocks ({type: text, text}); other blocks are an error naming them.
Result<std::string> text_of(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return std::string();
  if (!content.is_array()) return field_error(where, "must be a string or an array of text blocks");
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& b = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!b.is_object() || b.value("type", "") != "text" || !b.contains("text") || !b["text"].is_string()) {
      const std::string type = b.is_object() ? b.value("type", "") : "";
      return field_error(at, type.empty() || type == "text" ? "must be a text block {type: text, text}"
                                                            : "'" + type + "' blocks are not supported here");
    }
    if (!out.empty()) out += "\n";
    out += b["text"].get<std::string>();
  }
  return out;
}

Status convert_user(const json& content, const std::string& where, json& messages) {
  if (content.is_string()) {
    messages.push_back({{"role", "user"}, {"content", content}});
    return Status::ok();
  }
  if (!content.is_array()) return field_error(where, "must be a string or an array of content blocks");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& b = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!b.is_object()) return field_error(at, "must be a content block object");
    const std::string type = b.value("type", "");
    if (type == "text") {
      if (!b.contains("text") || !b["text"].is_string()) return field_error(at + ".text", "must be a string");
      if (!text.empty()) text += "\n";
      text += b["text"].get<std::string>();
    } else if (type == "tool_result") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
        return field_error(at + ".tool_use_id", "must be a string");
      auto result = text_of(b.value("content", json("")), at + ".content");
      if (!result.is_ok()) return result.status();
      std::string out = result.value();
      if (b.value("is_error", false)) out = "Error: " + out;
      messages.push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", out}});
    } else {
      return field_error(at + ".type",
                         "'" + type + "' blocks are not supported in user turns (text and tool_result are)");
    }
  }
  if (!text.empty() || content.empty()) messages.push_back({{"role", "user"}, {"content", text}});
  return Status::ok();
}

Status convert_assistant(const json& content, const std::string& where, json& messages) {
  if (content.is_string()) {
    messages.push_back({{"role", "assistant"}, {"content", content}});
    return Status::ok();
  }
  if (!content.is_array()) return field_error(where, "must be a string or an array of content blocks");
  std::string text, reasoning;
  json calls = json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const json& b = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!b.is_object()) return field_error(at, "must be a content block object");
    const std::string type = b.value("type", "");
    if (type == "text") {
      text += b.value("text", "");
    } else if (type == "thinking") {
      reasoning += b.value("thinking", "");
    } else if (type == "redacted_thinking") {
      continue;  // encrypted by Anthropic: nothing a local model can read
    } else if (type == "tool_use") {
      if (!b.contains("id") || !b["id"].is_string()) return field_error(at + ".id", "must be a string");
      if (!b.contains("name") || !b["name"].is_string()) return field_error(at + ".name", "must be a string");
      const json input = b.value("input", json::object());
      calls.push_back({{"id", b["id"]},
                       {"type", "function"},
                       {"function", {{"name", b["name"]}, {"arguments", dump_json(input)}}}});
    } else {
      return field_error(at + ".type", "'" + type + "' blocks are not supported in assistant turns");
    }
  }
  json m = {{"role", "assistant"}, {"content", text}};
  if (!reasoning.empty()) m["reasoning_content"] = reasoning;
  if (!calls.empty()) m["tool_calls"] = calls;
  messages.push_back(std::move(m));
  return Status::ok();
}

Status convert_tools(const json& body, json& out) {
  const json tools = body.value("tools", json());
  if (tools.is_null()) return Status::ok();
  if (!tools.is_array()) return field_error("tools", "must be an array");
  json converted = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
      return field_error(at + ".name", "must be a string");
    const std::string type = t.value("type", "custom");
    if (type != "custom" || !t.contains("input_schema")) {
      // Server tools (web_search_20250305, bash_20250124, ...) run at Anthropic, not here.
      log::write(log::Level::debug, "serve",
                 "messages: tool '" + t["name"].get<std::string>() + "' of type '" + type +
                     "' cannot run here and is left out of the prompt");
      continue;
    }
    if (!t["input_schema"].is_object()) return field_error(at + ".input_schema", "must be a JSON schema object");
    json f = {{"name", t["name"]}, {"parameters", t["input_schema"]}};
    if (t.contains("description") && t["description"].is_string()) f["description"] = t["description"];
    converted.push_back({{"type", "function"}, {"function", f}});
  }
  if (converted.empty()) return Status::ok();
  out["tools"] = converted;
  const json choice = body.value("tool_choice", json());
  if (choice.is_null()) return Status::ok();
  if (!choice.is_object() || !choice.contains("type") || !choice["type"].is_string()) {
    return field_error("tool_choice", "must be an object {type: auto|any|tool|none}");
  }
  const std::string type = choice["type"];
  if (choice.value("disable_parallel_tool_use", false)) out["parallel_tool_calls"] = false;
  if (type == "auto") {
    out["tool_choice"] = "auto";
  } else if (type == "any") {
    out["tool_choice"] = "required";
  } else if (type == "none") {
    out["tool_choice"] = "none";
  } else if (type == "tool") {
    const std::string name = choice.value("name", "");
    json only = json::array();
    for (const json& t : converted)
      if (t["function"]["name"] == name) only.push_back(t);
    if (only.empty()) return field_error("tool_choice.name", "names no tool in tools: '" + name + "'");
    out["tools"] = only;  // the one way to make the engine call exactly that tool
    out["tool_choice"] = "required";
  } else {
    return field_error("tool_choice.type", "must be one of auto, any, tool, none; got '" + type + "'");
  }
  return Status::ok();
}

Status convert_sampling(const json& body, json& out) {
  if (body.contains("max_tokens") && !body["max_tokens"].is_null()) {
    if (!body["max_tokens"].is_number_integer() || body["max_tokens"].get<int64_t>() < 1)
      return field_error("max_tokens", "must be an integer >= 1");
    out["max_tokens"] = body["max_tokens"];
  }
  for (const char* k : {"temperature", "top_p", "top_k"}) {
    if (body.contains(k) && !body[k].is_null()) out[k] = body[k];
  }
  if (body.contains("stop_sequences") && !body["stop_sequences"].is_null()) {
    const json& s = body["stop_sequences"];
    if (!s.is_array()) return field_error("stop_sequences", "must be an array of strings");
    for (const json& x : s)
      if (!x.is_string()) return field_error("stop_sequences", "must be an array of strings");
    if (!s.empty()) out["stop"] = s;
  }
  const json thinking = body.value("thinking", json());
  if (thinking.is_object()) {
    const std::string type = thinking.value("type", "");
    if (type == "disabled")
      out["chat_template_kwargs"] = {{"enable_thinking", false}};
    else if (type != "enabled" && type != "adaptive")
      return field_error("thinking.type", "must be enabled, adaptive or disabled; got '" + type + "'");
  }
  return Status::ok();
}

json usage_of(uint64_t input, uint64_t output, uint64_t cached) {
  return {{"input_tokens", input},
          {"output_tokens", output},
          {"cache_read_input_tokens", cached},
          {"cache_creation_input_tokens", 0}};
}

json tool_input(const std::string& arguments) {
  json input = json::parse(arguments, nullptr, false);
  return input.is_object() ? input : json::object();
}

}  // namespace

Result<json> to_openai(const json& body, const std::string& model_id) {
  json out = json::object();
  if (!body.contains("model") || body["model"].is_null()) {
    out["model"] = model_id;
  } else if (!body["model"].is_string()) {
    return field_error("model", "must be a string");
  } else if (body["model"] != model_id) {
    return Status::not_found("model '" + body["model"].get<std::string>() +
                             "' is not served here; this server serves '" + model_id + "'");
  } else {
    out["model"] = model_id;
  }
  for (const auto& [key, value] : body.items()) {
    if (!kKnown.count(key)) note_ignored("messages", key);
  }
  json messages = json::array();
  if (body.contains("system") && !body["system"].is_null()) {
    auto system = text_of(body["system"], "system");
    if (!system.is_ok()) return system.status();
    if (!system->empty()) messages.push_back({{"role", "system"}, {"content", system.value()}});
  }
  const json turns = body.value("messages", json());
  if (!turns.is_array() || turns.empty()) return field_error("messages", "must be a non-empty array");
  for (size_t i = 0; i < turns.size(); ++i) {
    const json& m = turns[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return field_error(at, "must be an object");
    const std::string role = m.value("role", "");
    if (!m.contains("content")) return field_error(at + ".content", "is required");
    Status s = role == "user"        ? convert_user(m["content"], at + ".content", messages)
               : role == "assistant" ? convert_assistant(m["content"], at + ".content", messages)
                                     : field_error(at + ".role", "must be user or assistant; got '" + role + "'");
    TANDEM_RETURN_IF_ERROR(s);
  }
  out["messages"] = std::move(messages);
  TANDEM_RETURN_IF_ERROR(convert_tools(body, out));
  TANDEM_RETURN_IF_ERROR(convert_sampling(body, out));
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) return field_error("stream", "must be a boolean");
    out["stream"] = body["stream"];
  }
  return out;
}

json error_object(const std::string& type, const std::string& message) {
  return {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
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
      return 529;
    default:
      return 500;
  }
}

std::string error_type(const Status& s) {
  switch (s.code()) {
    case StatusCode::invalid_argument:
      return "invalid_request_error";
    case StatusCode::not_found:
      return "not_found_error";
    case StatusCode::resource_exhausted:
      return "rate_limit_error";
    case StatusCode::unavailable:
      return "overloaded_error";
    default:
      return "api_error";
  }
}

std::string stop_reason(const GenerationEvent& done, const json& body, std::string* stop_sequence) {
  stop_sequence->clear();
  if (done.finish_reason == "length") return "max_tokens";
  if (done.finish_reason == "tool_calls") return "tool_use";
  if (!done.stop_sequence.empty()) {
    for (const json& s : body.value("stop", json::array())) {
      if (s == done.stop_sequence) {
        *stop_sequence = done.stop_sequence;
        return "stop_sequence";
      }
    }
  }
  return "end_turn";
}

Result<json> MessagesDialect::parse(const std::string& body, const std::string& model_id) {
  auto j = parse_json_object(body);
  if (!j.is_ok()) return j;
  auto out = to_openai(j.value(), model_id);
  if (out.is_ok()) stream_ = out->value("stream", false);
  return out;
}

std::string MessagesDialect::error_body(const Status& error) const {
  std::string message = error.message();
  // Anthropic's words for it, which clients that compact their history look for.
  if (openai::is_context_exceeded(error)) message = "prompt is too long: " + message;
  return dump_json(error_object(error_type(error), message));
}

std::string MessagesDialect::unauthorized_body(const std::string& message) const {
  return dump_json(error_object("authentication_error", message));
}

json MessagesDialect::response(const CallInfo& call, const Accumulated& a) {
  json content = json::array();
  if (!a.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", a.reasoning}, {"signature", ""}});
  if (!a.text.empty() || a.tool_calls.empty()) content.push_back({{"type", "text"}, {"text", a.text}});
  for (const json& t : a.tool_calls) {
    content.push_back({{"type", "tool_use"},
                       {"id", t["id"]},
                       {"name", t["function"]["name"]},
                       {"input", tool_input(t["function"]["arguments"].get<std::string>())}});
  }
  GenerationEvent done;
  done.finish_reason = a.finish_reason;
  done.stop_sequence = a.stop_sequence;
  std::string matched;
  const std::string reason = stop_reason(done, call.body, &matched);
  return {{"id", call.id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", call.model_id},
          {"content", content},
          {"stop_reason", reason},
          {"stop_sequence", matched.empty() ? json(nullptr) : json(matched)},
          {"usage", usage_of(a.prompt_tokens, a.completion_tokens, a.cached_tokens)}};
}

std::string MessagesDialect::stream_open(const CallInfo& call) {
  // The prompt's size is known only when the generation ends: message_delta carries it.
  json message = {{"id", call.id},
                  {"type", "message"},
                  {"role", "assistant"},
                  {"model", call.model_id},
                  {"content", json::array()},
                  {"stop_reason", nullptr},
                  {"stop_sequence", nullptr},
                  {"usage", usage_of(0, 0, 0)}};
  return sse_event("message_start", {{"type", "message_start"}, {"message", message}}) + stream_ping();
}

std::string MessagesDialect::open_block(Block kind, const json& start) {
  std::string out = close_block();
  block_ = kind;
  ++index_;
  return out + sse_event("content_block_start",
                         {{"type", "content_block_start"}, {"index", index_}, {"content_block", start}});
}

std::string MessagesDialect::close_block() {
  if (block_ == Block::none) return "";
  std::string out;
  if (block_ == Block::thinking) {
    // Anthropic closes a thinking block with its signature; a local model has none to give.
    out += sse_event("content_block_delta", {{"type", "content_block_delta"},
                                             {"index", index_},
                                             {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
  }
  block_ = Block::none;
  return out + sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
}

std::string MessagesDialect::stream_event(const CallInfo& call, const GenerationEvent& e, bool) {
  std::string out;
  auto delta = [&](const json& d) {
    out += sse_event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", d}});
  };
  if (!e.reasoning.empty()) {
    if (block_ != Block::thinking)
      out += open_block(Block::thinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
    delta({{"type", "thinking_delta"}, {"thinking", e.reasoning}});
  }
  if (!e.text.empty()) {
    if (block_ != Block::text) out += open_block(Block::text, {{"type", "text"}, {"text", ""}});
    delta({{"type", "text_delta"}, {"text", e.text}});
  }
  if (e.tool_calls.is_array()) {
    for (const json& t : e.tool_calls) {
      const int index = t.value("index", 0);
      if (block_ != Block::tool_use || index != tool_index_) {
        const json f = t.value("function", json::object());
        out += open_block(Block::tool_use, {{"type", "tool_use"},
                                            {"id", t.value("id", "")},
                                            {"name", f.value("name", "")},
                                            {"input", json::object()}});
        tool_index_ = index;
      }
      const std::string args = t.value("function", json::object()).value("arguments", "");
      if (!args.empty()) delta({{"type", "input_json_delta"}, {"partial_json", args}});
    }
  }
  if (e.type == GenerationEvent::Type::done) {
    if (index_ < 0)
      out += open_block(Block::text, {{"type", "text"}, {"text", ""}});  // a message has at least one block
    out += close_block();
    std::string matched;
    const std::string reason = stop_reason(e, call.body, &matched);
    out += sse_event(
        "message_delta",
        {{"type", "message_delta"},
         {"delta", {{"stop_reason", reason}, {"stop_sequence", matched.empty() ? json(nullptr) : json(matched)}}},
         {"usage", usage_of(e.prompt_tokens, e.completion_tokens, e.cached_tokens)}});
    out += sse_event("message_stop", {{"type", "message_stop"}});
  }
  return out;
}

std::string MessagesDialect::stream_error(const CallInfo&, const Status& error) {
  return "event: error\ndata: " + error_body(error) + "\n\n";
}

std::string MessagesDialect::stream_ping() const { return sse_event("ping", {{"type", "ping"}}); }

}  // namespace tandem::gateway::anthropic
